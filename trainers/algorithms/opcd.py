"""`opcd` and `opcd_offpolicy`: On-Policy Context Distillation (arXiv 2602.12275).

The student answers WITHOUT the context (an experience list or a system prompt); a frozen teacher (the start
model, or `teacher_path`) is given the context and scores the very same tokens. The loss is the reverse KL
KL(student || teacher) over the student's top-k tokens at each sampled position (k=256 by default, capped by the
vocabulary; optionally renormalised over the top-k), so the student learns to behave as if it had read the
context. `opcd_offpolicy` is the paper's baseline: the teacher generates with the context and the student is
trained by forward KL on those teacher sequences.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

import torch
from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample
from trainers import losses, runtime
from trainers import onpolicy as op
from trainers.experience import load_context
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult
from trainers.runtime import Pace


class OPCDConfig(op.OnPolicyConfig):
    """Context to distil, and the KL's shape."""

    context: str | None = Field(
        default=None, description="Inline system prompt the teacher reads (and the student must internalise)."
    )
    context_file: Path | None = Field(
        default=None, description="Experience list (.json/.jsonl) or system-prompt text file for the teacher."
    )
    teacher_path: Path | None = Field(
        default=None, description="Frozen teacher checkpoint; None: model_path (the start model)."
    )
    top_k: int = Field(default=256, ge=1, description="Student tokens per position the reverse KL sums over.")
    renormalise: bool = Field(
        default=False, description="Renormalise both distributions over the top-k before the KL."
    )
    learning_rate: float = 1e-4
    max_steps: int | None = 100
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


@dataclass(frozen=True)
class _Distillation:
    """What each step of one `distill` run reads: the two models, the context only the teacher is shown, the
    sampling settings."""

    student: PreTrainedModel
    teacher: PreTrainedModel
    tokenizer: PreTrainedTokenizerBase
    context: str
    config: OPCDConfig
    max_new_tokens: int

    def _sample(self, model: PreTrainedModel, prompts: Sequence[str]) -> op.Rollout:
        return op.sample(
            model,
            self.tokenizer,
            prompts,
            max_new_tokens=self.max_new_tokens,
            temperature=self.config.temperature,
        )

    def on_policy_step(self, prompts: Sequence[str]) -> tuple[torch.Tensor, int]:
        """Sample from the student without context; return (top-k reverse KL to the context-reading teacher,
        tokens)."""
        rollout = self._sample(self.student, prompts)
        width = rollout.completion_ids.shape[1]
        teacher_ids, teacher_mask = op.with_prompts(
            self.tokenizer,
            [self.context + p for p in prompts],
            rollout.completion_ids,
            rollout.completion_mask,
        )
        check_fits(self.teacher, teacher_ids.shape[1], "context + prompt + completion")
        with torch.no_grad():
            teacher_logits = op.completion_logits(self.teacher, teacher_ids, teacher_mask, width)
        student_logits = op.completion_logits(self.student, rollout.sequences, rollout.attention_mask, width)
        kl = losses.topk_reverse_kl(
            student_logits,
            teacher_logits,
            rollout.completion_mask,
            top_k=self.config.top_k,
            renormalise=self.config.renormalise,
        )
        return kl, int(rollout.attention_mask.sum())

    def off_policy_step(self, prompts: Sequence[str]) -> tuple[torch.Tensor, int]:
        """Teacher samples with the context; forward KL(teacher || student) on those tokens, student without
        context."""
        with torch.no_grad():
            rollout = self._sample(self.teacher, [self.context + p for p in prompts])
            width = rollout.completion_ids.shape[1]
            teacher_logits = op.completion_logits(
                self.teacher, rollout.sequences, rollout.attention_mask, width
            )
        student_ids, student_mask = op.with_prompts(
            self.tokenizer, prompts, rollout.completion_ids, rollout.completion_mask
        )
        student_logits = op.completion_logits(self.student, student_ids, student_mask, width)
        return losses.forward_kl(teacher_logits, student_logits, rollout.completion_mask), int(
            student_mask.sum()
        )


def distill(
    student: PreTrainedModel,
    teacher: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[Sample],
    context: str,
    config: OPCDConfig,
    *,
    on_policy: bool = True,
    pace: Pace | None = None,
    log: Callable[[dict[str, float]], None] | None = None,
) -> tuple[list[dict[str, float]], int]:
    """Up to `config.max_steps` distillation steps of `context` into `student`, on `pace`'s clock and schedule (a
    fresh one from `config` when None); returns (per-step history, tokens)."""
    distillation = _Distillation(student, teacher, tokenizer, context, config, op.new_tokens_budget(config))
    distill_step = distillation.on_policy_step if on_policy else distillation.off_policy_step
    next_batch = op.batches(samples, config.prompts_per_step(), config.seed)
    optimizer = op.optimizer_for(student, config.learning_rate)
    if pace is None:
        pace = Pace(config)
        pace.begin_training(student)
    history: list[dict[str, float]] = []
    tokens = 0
    for step_number in itertools.count(1):
        if config.max_steps is not None and step_number > config.max_steps:
            break
        if not pace.begin_step(optimizer):
            break
        prompts = [s.prompt for s in next_batch() for _ in range(config.num_generations)]
        kl, used = distill_step(prompts)
        op.step(student, optimizer, kl, config.max_grad_norm)
        tokens += used
        row = {"step": float(step_number), "kl": float(kl.detach()), "seconds": pace.elapsed}
        history.append(row)
        if log is not None and (step_number % config.logging_steps == 0 or step_number == 1):
            log(row)
    return history, tokens


def distill_and_finish(
    recipe: str,
    session: op.Session[OPCDConfig],
    teacher: PreTrainedModel,
    samples: Sequence[Sample],
    context: str,
    *,
    on_policy: bool = True,
    label: str | None = None,
    extra: dict[str, float | None] | None = None,
) -> TrainResult:
    """`distill` on the session's policy, then its metrics.json: the KL is the loss, kl_first/kl_last its ends."""
    config = session.config
    label = label or recipe
    history, tokens = distill(
        session.model,
        teacher,
        session.tokenizer,
        samples,
        context,
        config,
        on_policy=on_policy,
        pace=session.pace,
        log=lambda row: runtime.log(f"{label} step {session.of_steps(int(row['step']))} kl {row['kl']:.4g}"),
    )
    kl_ends = {
        "kl_first": history[0]["kl"] if history else None,
        "kl_last": history[-1]["kl"] if history else None,
    }
    return session.finish(recipe, history, tokens=tokens, loss_key="kl", extra={**(extra or {}), **kl_ends})


def _run(config: OPCDConfig, *, on_policy: bool) -> TrainResult:
    config.prompts_per_step()
    op.seed_everything(config.seed)
    context = load_context(config.context, config.context_file)
    samples = op.load_samples(config.train_file, config.max_train_samples, op.chat_prompts(config))
    student, tokenizer = op.load_policy(config)
    teacher = op.load_frozen(config.teacher_path or config.model_path)
    session = op.Session(config, student, tokenizer)
    name = "opcd" if on_policy else "opcd_offpolicy"
    return distill_and_finish(name, session, teacher, samples, context, on_policy=on_policy)


def run(config: OPCDConfig) -> TrainResult:
    """On-policy context distillation; checkpoint and metrics.json into `config.output_dir`."""
    return _run(config, on_policy=True)


def run_offpolicy(config: OPCDOffPolicyConfig) -> TrainResult:
    """The off-policy baseline (forward KL on teacher-generated sequences)."""
    return _run(config, on_policy=False)


register_recipe(
    Recipe(
        name="opcd",
        description="On-policy context distillation: top-k reverse KL to the start model reading the context.",
        config_class=OPCDConfig,
        run=run,
    )
)
register_recipe(
    Recipe(
        name="opcd_offpolicy",
        description="Off-policy context distillation baseline: forward KL on teacher-generated sequences.",
        config_class=OPCDOffPolicyConfig,
        run=run_offpolicy,
    )
)
