"""`gad`: Generative Adversarial Distillation (arXiv 2511.10643), black-box distillation as a two-player game.

The discriminator is a model of the student's family with a scalar head on the last token, trained with the
Bradley-Terry loss -log sigma(D(y_teacher) - D(y_student)). The student is the generator: it samples G
completions per prompt, D's scores are its rewards, and it takes a GRPO-style group-normalised policy-gradient step
(exactly on-policy, one step per batch). An SFT warm-up on the teacher's responses comes first; in the tiny setting
the teacher's responses are the reference answers of the train file (set `teacher_file` to use another teacher's
responses: a JSONL with `prompt` and `answer` = the teacher's response).
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from pathlib import Path

import torch
from pydantic import Field
from transformers import AutoModelForSequenceClassification, PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample
from trainers import device, losses, runtime
from trainers import onpolicy as op
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult


class GADConfig(op.OnPolicyConfig):
    """Generator (student) and discriminator settings."""

    learning_rate: float = Field(default=1e-4, description="Learning rate of the student (the generator).")
    discriminator_learning_rate: float = Field(
        default=1e-4, description="Learning rate of the discriminator."
    )
    discriminator_path: Path | None = Field(
        default=None, description="Discriminator backbone; None: model_path (a fresh scalar head is added)."
    )
    teacher_file: Path | None = Field(
        default=None,
        description="JSONL of teacher responses (prompt, answer); None: train_file's references.",
    )
    sft_warmup_steps: int = Field(
        default=10, ge=0, description="SFT steps on teacher responses (and D steps) before the game."
    )
    scale_rewards_by_std: bool = Field(
        default=True, description="Group normalisation of D's scores: GRPO (true) or Dr. GRPO (false)."
    )
    max_steps: int | None = Field(
        default=100, description="Game steps after the warm-up (None: as many as max_seconds allows)."
    )
    per_device_train_batch_size: int = 32


def load_discriminator(path: Path, pad_token_id: int | None) -> PreTrainedModel:
    """A sequence scorer: the backbone of `path` plus a scalar head read at the last non-padding token, beside the
    student (`trainers.device`)."""
    model = device.load_model(AutoModelForSequenceClassification, path, num_labels=1)
    if model.config.pad_token_id is None:
        model.config.pad_token_id = pad_token_id
    model.train()
    return model


def teacher_completions(
    tokenizer: PreTrainedTokenizerBase, responses: Sequence[str], on: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-padded response ids ending in EOS, and their mask (on device `on`), for placing after left-padded
    prompts."""
    eos = tokenizer.eos_token_id
    encoded = [
        tokenizer(r, add_special_tokens=False)["input_ids"] + ([eos] if eos is not None else [])
        for r in responses
    ]
    width = max(len(e) for e in encoded)
    ids = torch.full((len(encoded), width), int(tokenizer.pad_token_id), dtype=torch.long)
    mask = torch.zeros((len(encoded), width), dtype=torch.long)
    for row, seq in enumerate(encoded):
        ids[row, : len(seq)] = torch.tensor(seq)
        mask[row, : len(seq)] = 1
    return ids.to(on), mask.to(on)


def score(
    discriminator: PreTrainedModel, sequences: torch.Tensor, attention_mask: torch.Tensor
) -> torch.Tensor:
    """D's scalar per sequence, [B]."""
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    out = discriminator(input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids)
    return out.logits.squeeze(-1).float()


def sft_loss(
    model: PreTrainedModel,
    sequences: torch.Tensor,
    attention_mask: torch.Tensor,
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> torch.Tensor:
    """Mean negative log-likelihood of the completion tokens."""
    logits = op.completion_logits(model, sequences, attention_mask, completion_ids.shape[1])
    logp = op.token_logprobs(logits, completion_ids)
    mask = completion_mask.float()
    return -(logp * mask).sum() / mask.sum().clamp(min=1.0)


def _teacher_samples(config: GADConfig) -> list[Sample]:
    return op.load_samples(
        config.teacher_file or config.train_file, config.max_train_samples, op.chat_prompts(config)
    )


def run(config: GADConfig) -> TrainResult:
    """Warm up, then alternate student (policy gradient on D's score) and discriminator (Bradley-Terry) steps."""
    config.prompts_per_step()
    op.seed_everything(config.seed)
    samples = _teacher_samples(config)
    student, tokenizer = op.load_policy(config)
    discriminator = load_discriminator(config.discriminator_path or config.model_path, tokenizer.pad_token_id)
    prompts_per_step = config.prompts_per_step()
    group = config.num_generations
    max_new = op.new_tokens_budget(config)
    next_batch = op.batches(samples, prompts_per_step, config.seed)
    student_opt = op.optimizer_for(student, config.learning_rate)
    disc_opt = op.optimizer_for(discriminator, config.discriminator_learning_rate)
    total_steps = config.sft_warmup_steps + config.max_steps if config.max_steps is not None else None
    session = op.Session(config, student, tokenizer, planned_steps=total_steps)
    history: list[dict[str, float]] = []
    tokens = 0
    for step_number in itertools.count(1):
        if not session.begin_step(student_opt, disc_opt):
            break
        warmup = step_number <= config.sft_warmup_steps
        batch = next_batch()
        prompts = [s.prompt for s in batch]
        t_ids, t_mask = teacher_completions(tokenizer, [s.answer for s in batch], op.device_of(student))
        teacher_seq, teacher_attn = op.with_prompts(tokenizer, prompts, t_ids, t_mask)
        repeated = [p for p in prompts for _ in range(group)]
        rollout = op.sample(
            student, tokenizer, repeated, max_new_tokens=max_new, temperature=config.temperature
        )

        row: dict[str, float] = {"step": float(step_number), "warmup": float(warmup)}
        if warmup:
            loss = sft_loss(student, teacher_seq, teacher_attn, t_ids, t_mask)
            op.step(student, student_opt, loss, config.max_grad_norm)
            row["sft_loss"] = float(loss.detach())
            tokens += int(teacher_attn.sum())
        else:
            with torch.no_grad():
                rewards = score(discriminator, rollout.sequences, rollout.attention_mask)
            advantages = losses.group_advantages(rewards, group, scale_by_std=config.scale_rewards_by_std)
            pg_loss = op.policy_gradient_step(
                student,
                student_opt,
                rollout,
                advantages,
                float(len(repeated) * max_new),
                config.max_grad_norm,
            )
            row["student_reward"] = float(rewards.mean())
            row["pg_loss"] = pg_loss
            tokens += int(rollout.attention_mask.sum())

        # Discriminator: the teacher's response should outscore each of the student's samples for its prompt.
        teacher_scores = score(discriminator, teacher_seq, teacher_attn).repeat_interleave(group)
        student_scores = score(discriminator, rollout.sequences, rollout.attention_mask)
        bt = losses.bradley_terry_loss(teacher_scores, student_scores)
        op.step(discriminator, disc_opt, bt, config.max_grad_norm)
        row["bt_loss"] = float(bt.detach())
        row["seconds"] = session.pace.elapsed
        history.append(row)
        if session.log_due(step_number):
            runtime.log(
                f"gad step {session.of_steps(step_number)} "
                + " ".join(f"{k} {v:.4g}" for k, v in row.items() if k != "step")
            )

    bt_values = [row["bt_loss"] for row in history]
    bt_ends = {
        "bt_loss_first": bt_values[0] if bt_values else None,
        "bt_loss_last": bt_values[-1] if bt_values else None,
    }
    return session.finish(
        "gad",
        history,
        tokens=tokens,
        reward_key="student_reward",
        loss_key="pg_loss",
        extra=bt_ends,
    )


register_recipe(
    Recipe(
        name="gad",
        description="Generative adversarial distillation: PG on a Bradley-Terry discriminator's score, after SFT warm-up.",
        config_class=GADConfig,
        run=run,
    )
)
