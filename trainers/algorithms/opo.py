"""`opo`: On-Policy RL with Optimal reward baseline (arXiv 2505.23585), as a small readable torch loop.

Each step: sample G completions for each of a few prompts with the current policy, score them with the benchmark's
reward, take advantages r_i - b with the length-weighted optimal baseline b = sum(l_i r_i) / sum(l_i) per group
(no std division), and take exactly one optimiser step on that batch, so training is exactly on-policy (the
importance ratio is 1 and no clipping or KL penalty is needed).
"""

from __future__ import annotations

import torch

from trainers import losses, runtime
from trainers.algorithms import onpolicy as op
from trainers.registry import Recipe
from trainers.result import TrainResult


class OPOConfig(op.OnPolicyConfig):
    """OPO's knobs beyond the shared on-policy fields."""

    learning_rate: float = 1e-4
    max_steps: int = 100
    per_device_train_batch_size: int = 64  # completions per step (prompts x num_generations)
    constant_normaliser: bool = True  # divide by B * max_new_tokens (Dr. GRPO) instead of the token count


def run(config: OPOConfig) -> TrainResult:
    """Train with OPO and save the checkpoint and metrics.json into `config.output_dir`."""
    prompts_per_step = config.prompts_per_step()
    op.seed_everything(config.seed)
    samples = op.load_samples(config.train_file, config.max_train_samples)
    model, tokenizer = op.load_policy(config)
    reward_fn = op.benchmark_reward(config.benchmark)
    runtime.prepare_output_dir(config.output_dir)
    max_new = op.new_tokens_budget(config)
    next_batch = op.batches(samples, prompts_per_step, config.seed)
    optimizer = op.optimizer_for(model, config.learning_rate)
    eval_before = op.evaluate(model, tokenizer, config)

    clock = op.Clock(config.max_seconds)
    history: list[dict[str, float]] = []
    tokens = 0
    steps_done = 0
    for step_number in range(1, config.max_steps + 1):
        if clock.expired():
            break
        batch = [s for s in next_batch() for _ in range(config.num_generations)]
        rollout = op.sample(
            model,
            tokenizer,
            [s.prompt for s in batch],
            max_new_tokens=max_new,
            temperature=config.temperature,
        )
        rewards = torch.tensor(reward_fn(rollout.texts, batch))
        advantages = losses.opo_advantages(rewards, rollout.lengths, config.num_generations)
        logits = op.completion_logits(
            model, rollout.sequences, rollout.attention_mask, rollout.completion_ids.shape[1]
        )
        logprobs = op.token_logprobs(logits, rollout.completion_ids)
        normaliser = float(len(batch) * max_new) if config.constant_normaliser else None
        loss = losses.policy_gradient_loss(
            logprobs, advantages, rollout.completion_mask, normaliser=normaliser
        )
        op.step(model, optimizer, loss, config.max_grad_norm)
        tokens += int(rollout.attention_mask.sum())
        steps_done = step_number
        row = {
            "step": float(step_number),
            "reward": float(rewards.mean()),
            "loss": float(loss.detach()),
            "completion_length": float(rollout.lengths.float().mean()),
            "seconds": clock.elapsed,
        }
        history.append(row)
        if step_number % config.logging_steps == 0 or step_number == 1:
            runtime.log(
                f"opo step {step_number}/{config.max_steps} reward {row['reward']:.4g} loss {row['loss']:.4g}"
            )

    return op.finish(
        recipe="opo",
        config=config,
        model=model,
        tokenizer=tokenizer,
        history=history,
        clock=clock,
        samples_seen=steps_done * config.per_device_train_batch_size,
        reward_key="reward",
        extra={
            "train_tokens": tokens,
            "tokens_per_second": tokens / max(clock.elapsed, 1e-9),
            "eval_accuracy_before": eval_before,
            "eval_accuracy": op.evaluate(model, tokenizer, config),
        },
    )


RECIPE = Recipe(
    name="opo",
    description="Exactly on-policy RL with OPO's length-weighted optimal baseline (arXiv 2505.23585).",
    config_class=OPOConfig,
    run=run,
)
