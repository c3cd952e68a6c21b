"""`opo`: On-Policy RL with Optimal reward baseline (arXiv 2505.23585), as a small readable torch loop.

Each step: sample G completions for each of a few prompts with the current policy, score them with the benchmark's
reward, take advantages r_i - b with the length-weighted optimal baseline b = sum(l_i r_i) / sum(l_i) per group
(no std division), and take exactly one optimiser step on that batch, so training is exactly on-policy (the
importance ratio is 1 and no clipping or KL penalty is needed).
"""

from __future__ import annotations

import torch
from pydantic import Field

from trainers import losses, runtime
from trainers import onpolicy as op
from trainers.config import TrainRowChoices
from trainers.data import RowMoves
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult


class OPOConfig(op.OnPolicyConfig, TrainRowChoices):
    """OPO's knobs beyond the shared on-policy fields."""

    learning_rate: float = 1e-4
    max_steps: int | None = 100
    per_device_train_batch_size: int = 64  # completions per step (prompts x num_generations)
    constant_normaliser: bool = Field(
        default=True,
        description="Divide the loss by B * max_new_tokens (Dr. GRPO) instead of the token count.",
    )


def run(config: OPOConfig) -> TrainResult:
    """Train with OPO and save the checkpoint and metrics.json into `config.output_dir`."""
    op.seed_everything(config.seed)
    samples = op.load_samples(
        config.train_file, config.max_train_samples, op.chat_prompts(config), RowMoves.of(config)
    )
    model, tokenizer = op.load_policy(config)
    reward_fn = op.benchmark_reward(config.benchmark, config.prompt_format)
    max_new = op.new_tokens_budget(config)
    optimizer = op.optimizer_for(model, config.learning_rate)
    session = op.Session(config, model, tokenizer)
    history: list[dict[str, float]] = []
    for step_number, batch, rollout in session.rollouts(optimizer, samples, max_new):
        rewards = torch.tensor(reward_fn(rollout.texts, batch), device=rollout.lengths.device)
        advantages = losses.opo_advantages(rewards, rollout.lengths, config.num_generations)
        normaliser = float(len(batch) * max_new) if config.constant_normaliser else None
        loss = op.policy_gradient_step(
            model, optimizer, rollout, advantages, normaliser, config.max_grad_norm
        )
        row = {
            "step": float(step_number),
            "reward": float(rewards.mean()),
            "loss": loss,
            "completion_length": float(rollout.lengths.float().mean()),
            "seconds": session.pace.elapsed,
        }
        history.append(row)
        if session.log_due(step_number):
            runtime.log(
                f"opo step {session.of_steps(step_number)} reward {row['reward']:.4g} loss {loss:.4g}"
            )
    return session.finish("opo", history, tokens=session.rollout_tokens, reward_key="reward")


register_recipe(
    Recipe(
        name="opo",
        description="Exactly on-policy RL with OPO's length-weighted optimal baseline (arXiv 2505.23585).",
        config_class=OPOConfig,
        run=run,
    )
)
