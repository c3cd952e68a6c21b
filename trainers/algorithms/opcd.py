"""`opcd` and `opcd_offpolicy`: On-Policy Context Distillation (arXiv 2602.12275).

The student answers WITHOUT the context (an experience list or a system prompt); a frozen teacher (the start
model, or `teacher_path`) is given the context and scores the very same tokens. The loss is the reverse KL
KL(student || teacher) over the student's top-k tokens at each sampled position (k=256 by default, capped by the
vocabulary; optionally renormalised over the top-k), so the student learns to behave as if it had read the
context. `opcd_offpolicy` is the paper's baseline: the teacher generates with the context and the student is
trained by forward KL on those teacher sequences.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import torch
from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample
from trainers import losses, runtime
from trainers.algorithms import onpolicy as op
from trainers.experience import load_context
from trainers.registry import Recipe
from trainers.result import TrainResult


class OPCDConfig(op.OnPolicyConfig):
    """Context to distil, and the KL's shape."""

    context: str | None = None  # inline system prompt
    context_file: Path | None = None  # experience list (.json/.jsonl) or system-prompt text file
    teacher_path: Path | None = None  # default: model_path (the frozen start model)
    top_k: int = Field(default=256, ge=1)
    renormalise: bool = False
    learning_rate: float = 1e-4
    max_steps: int = 100
    num_generations: int = 1
    per_device_train_batch_size: int = 32


class OPCDOffPolicyConfig(OPCDConfig):
    """Same fields; the teacher samples (with the context) instead of the student."""


def check_fits(model: PreTrainedModel, width: int, what: str) -> None:
    """Refuse sequences longer than the model's positions, with what to shorten."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is not None and width > limit:
        raise ValueError(
            f"{what} is {width} tokens but the model takes at most {limit}; shorten the context or max_new_tokens"
        )


def on_policy_distill_step(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    context: str,
    *,
    max_new_tokens: int,
    temperature: float,
    top_k: int,
    renormalise: bool,
) -> tuple[torch.Tensor, int]:
    """Sample from the student without context; return (top-k reverse KL to the context-reading teacher, tokens)."""
    rollout = op.sample(student, tokenizer, prompts, max_new_tokens=max_new_tokens, temperature=temperature)
    width = rollout.completion_ids.shape[1]
    teacher_ids, teacher_mask = op.with_prompts(
        tokenizer, [context + p for p in prompts], rollout.completion_ids, rollout.completion_mask
    )
    check_fits(teacher, teacher_ids.shape[1], "context + prompt + completion")
    with torch.no_grad():
        teacher_logits = op.completion_logits(teacher, teacher_ids, teacher_mask, width)
    student_logits = op.completion_logits(student, rollout.sequences, rollout.attention_mask, width)
    kl = losses.topk_reverse_kl(
        student_logits, teacher_logits, rollout.completion_mask, top_k=top_k, renormalise=renormalise
    )
    return kl, int(rollout.attention_mask.sum())


def off_policy_distill_step(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    context: str,
    *,
    max_new_tokens: int,
    temperature: float,
) -> tuple[torch.Tensor, int]:
    """Teacher samples with the context; forward KL(teacher || student) on those tokens, student without context."""
    with torch.no_grad():
        rollout = op.sample(
            teacher,
            tokenizer,
            [context + p for p in prompts],
            max_new_tokens=max_new_tokens,
            temperature=temperature,
        )
        width = rollout.completion_ids.shape[1]
        teacher_logits = op.completion_logits(teacher, rollout.sequences, rollout.attention_mask, width)
    student_ids, student_mask = op.with_prompts(
        tokenizer, prompts, rollout.completion_ids, rollout.completion_mask
    )
    student_logits = op.completion_logits(student, student_ids, student_mask, width)
    return losses.forward_kl(teacher_logits, student_logits, rollout.completion_mask), int(student_mask.sum())


def distill(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[Sample],
    context: str,
    config: OPCDConfig,
    *,
    on_policy: bool = True,
    clock: op.Clock | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], int]:
    """`config.max_steps` distillation steps of `context` into `student`; returns (per-step history, tokens)."""
    max_new = op.new_tokens_budget(config)
    next_batch = op.batches(samples, config.prompts_per_step(), config.seed)
    optimizer = op.optimizer_for(student, config.learning_rate)
    clock = clock or op.Clock(config.max_seconds)
    history: list[dict[str, float]] = []
    tokens = 0
    for step_number in range(1, config.max_steps + 1):
        if clock.expired():
            break
        prompts = [s.prompt for s in next_batch() for _ in range(config.num_generations)]
        if on_policy:
            kl, used = on_policy_distill_step(
                student,
                teacher,
                tokenizer,
                prompts,
                context,
                max_new_tokens=max_new,
                temperature=config.temperature,
                top_k=config.top_k,
                renormalise=config.renormalise,
            )
        else:
            kl, used = off_policy_distill_step(
                student,
                teacher,
                tokenizer,
                prompts,
                context,
                max_new_tokens=max_new,
                temperature=config.temperature,
            )
        op.step(student, optimizer, kl, config.max_grad_norm)
        tokens += used
        row = {"step": float(step_number), "kl": float(kl.detach()), "seconds": clock.elapsed}
        history.append(row)
        if log is not None and (step_number % config.logging_steps == 0 or step_number == 1):
            log(row)
    return history, tokens


def _run(config: OPCDConfig, *, on_policy: bool) -> TrainResult:
    name = "opcd" if on_policy else "opcd_offpolicy"
    config.prompts_per_step()
    op.seed_everything(config.seed)
    context = load_context(config.context, config.context_file)
    samples = op.load_samples(config.train_file, config.max_train_samples)
    student, tokenizer = op.load_policy(config)
    teacher = op.load_frozen(config.teacher_path or config.model_path)
    runtime.prepare_output_dir(config.output_dir)
    eval_before = op.evaluate(student, tokenizer, config)
    clock = op.Clock(config.max_seconds)
    history, tokens = distill(
        student,
        teacher,
        tokenizer,
        samples,
        context,
        config,
        on_policy=on_policy,
        clock=clock,
        log=lambda row: runtime.log(f"{name} step {int(row['step'])}/{config.max_steps} kl {row['kl']:.4g}"),
    )
    return op.finish(
        recipe=name,
        config=config,
        model=student,
        tokenizer=tokenizer,
        history=history,
        clock=clock,
        samples_seen=len(history) * config.per_device_train_batch_size,
        loss_key="kl",
        extra={
            "kl_first": history[0]["kl"] if history else None,
            "kl_last": history[-1]["kl"] if history else None,
            "train_tokens": tokens,
            "tokens_per_second": tokens / max(clock.elapsed, 1e-9),
            "eval_accuracy_before": eval_before,
            "eval_accuracy": op.evaluate(student, tokenizer, config),
        },
    )


def run(config: OPCDConfig) -> TrainResult:
    """On-policy context distillation; checkpoint and metrics.json into `config.output_dir`."""
    return _run(config, on_policy=True)


def run_offpolicy(config: OPCDOffPolicyConfig) -> TrainResult:
    """The off-policy baseline (forward KL on teacher-generated sequences)."""
    return _run(config, on_policy=False)


RECIPE = Recipe(
    name="opcd",
    description="On-policy context distillation: top-k reverse KL to the start model reading the context.",
    config_class=OPCDConfig,
    run=run,
)
