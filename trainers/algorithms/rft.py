"""`rft`: rejection-sampling fine-tuning (expert iteration; STaR and ReST-EM without rationales), as a small torch
loop.

Each step samples `num_generations` completions for each of a few train prompts from the current model, keeps the
ones the benchmark's checker accepts (at most `keep_per_prompt` distinct ones per prompt), and takes one supervised
step on them: cross-entropy on the kept completions' tokens. It needs prompts and an exact checker, not answers, so
it trains on prompts that have no answer and is not misled by wrong ones in the data: with `checker="verifier"` a
completion is judged from its prompt alone (`tasks.base.Verifier`); `"score"` is the benchmark's own scoring rule,
as the grader applies it (against the answer column where the benchmark needs one).

The learning rate follows the trial's schedule over its own progress (`trainers.schedule`, as every recipe's): the
larger of the steps taken over `max_steps` and the training seconds spent over those it has.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

import torch
from pydantic import Field

from tasks import Sample, get_benchmark
from tasks.base import Verifier, stop_strings
from trainers import onpolicy as op
from trainers import runtime
from trainers.config import TrainRowChoices
from trainers.data import DataFileError, RowMoves
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult
from trainers.rewards import cut_at_stop

Checker = Literal["score", "verifier"]


class RFTConfig(op.OnPolicyConfig, TrainRowChoices):
    """RFT's knobs beyond the shared on-policy fields. Sampling and training are decoupled: each round samples
    `num_generations` completions for `prompts_per_round` prompts; accepted ones queue up, and each optimizer step
    trains on `per_device_train_batch_size` of them (a small step on a handful of samples at an SFT rate wrecks a
    small model: measured on tiny-arith, acceptance fell from 8% to 0 in 50 such steps)."""

    learning_rate: float = 1e-3
    max_steps: int | None = 300
    per_device_train_batch_size: int = Field(
        default=64, ge=1, description="Accepted completions per optimizer step (as SFT's rows per step)."
    )
    num_generations: int = 4
    prompts_per_round: int = Field(default=64, ge=1, description="Prompts sampled together in one round.")
    checker: Checker = Field(
        default="score",
        description="What accepts a completion: score, the benchmark's scoring rule as the grader applies it; "
        "verifier, its exact check from the prompt alone (prompts without an answer, or with a wrong one, "
        "still count).",
    )
    keep_per_prompt: int = Field(
        default=1, ge=1, description="Most accepted completions kept per prompt and round (distinct texts)."
    )
    warmup_steps: int | None = 10

    def prompts_per_step(self) -> int:
        """Prompts per sampling round (any batch size works: accepted completions queue up between steps)."""
        return self.prompts_per_round


EMPTY_ROUNDS = 20  # rounds in a row that accept nothing: the model's samples are never right, so stop


def checker(config: RFTConfig) -> op.RewardFn:
    """Accepts (1.0) or rejects each completion of raw (unrendered) samples, cut at the benchmark's stop strings."""
    benchmark = get_benchmark(config.benchmark)
    if config.checker == "score":
        return op.benchmark_reward(config.benchmark, config.prompt_format)
    if not isinstance(benchmark, Verifier):
        raise DataFileError(
            f"checker=verifier: benchmark {config.benchmark!r} has no verifier (its score needs the answer "
            "column); use checker=score"
        )
    stop = stop_strings(benchmark, config.prompt_format)
    verifier = benchmark

    def verified(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        return [
            float(verifier.verify(cut_at_stop(c, stop), s.prompt))
            for c, s in zip(completions, samples, strict=True)
        ]

    return verified


def kept_rows(texts: Sequence[str], accepted: Sequence[float], group: int, per_prompt: int) -> list[int]:
    """Indices of the completions to train on: accepted ones, at most `per_prompt` distinct texts per prompt
    (a prompt's `group` completions are consecutive)."""
    keep: list[int] = []
    for start in range(0, len(texts), group):
        seen: set[str] = set()
        for index in range(start, start + group):
            if accepted[index] >= 1.0 and texts[index] not in seen and len(seen) < per_prompt:
                seen.add(texts[index])
                keep.append(index)
    return keep


def accepted_sequences(rollout: op.Rollout, keep: Sequence[int]) -> list[tuple[list[int], list[int]]]:
    """(prompt ids without padding, completion ids up to and including the first EOS) of each kept completion."""
    width = rollout.completion_ids.shape[1]
    prompts = rollout.sequences[:, : rollout.sequences.shape[1] - width]
    prompt_mask = rollout.attention_mask[:, : prompts.shape[1]]
    return [
        (
            prompts[i][prompt_mask[i].bool()].tolist(),
            rollout.completion_ids[i][rollout.completion_mask[i].bool()].tolist(),
        )
        for i in keep
    ]


def supervised_batch(
    rows: Sequence[tuple[list[int], list[int]]], pad_token_id: int, on: torch.device
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    """Left-padded prompt + completion ids, their attention mask and a completion mask over the last T columns
    (T: the longest completion; shorter ones are padded on the right inside those columns and masked out)."""
    width = max(len(completion) for _, completion in rows)
    length = max(len(prompt) for prompt, _ in rows) + width
    ids = torch.full((len(rows), length), pad_token_id, dtype=torch.long)
    attention = torch.zeros((len(rows), length), dtype=torch.long)
    completion_mask = torch.zeros((len(rows), width), dtype=torch.long)
    for row, (prompt, completion) in enumerate(rows):
        start = length - width - len(prompt)
        ids[row, start : length - width] = torch.tensor(prompt)
        ids[row, length - width : length - width + len(completion)] = torch.tensor(completion)
        attention[row, start : length - width + len(completion)] = 1
        completion_mask[row, : len(completion)] = 1
    return ids.to(on), attention.to(on), completion_mask.to(on), width


def run(config: RFTConfig) -> TrainResult:
    """Train by rejection sampling and save the checkpoint and metrics.json into `config.output_dir`."""
    op.seed_everything(config.seed)
    chat = op.chat_prompts(config)
    samples = op.load_samples(config.train_file, config.max_train_samples, None, RowMoves.of(config))
    accept = checker(config)
    model, tokenizer = op.load_policy(config)
    max_new = op.new_tokens_budget(config)
    next_batch = op.batches(samples, config.prompts_per_round, config.seed)
    optimizer = op.optimizer_for(model, config.learning_rate)
    session = op.Session(config, model, tokenizer)
    runtime.log(
        f"rft: {len(samples)} prompts, {config.num_generations} samples each, checker {config.checker}, "
        f"{config.per_device_train_batch_size} accepted completions a step, {runtime.steps_text(config)}"
    )
    history: list[dict[str, float]] = []
    queue: list[tuple[list[int], list[int]]] = []
    sampled = accepted_total = tokens = empty = 0
    step_number = 0
    while not session.pace.expired():
        batch = [s for s in next_batch() for _ in range(config.num_generations)]
        rollout = op.sample(
            model,
            tokenizer,
            [chat.render(s.prompt) if chat is not None else s.prompt for s in batch],
            max_new_tokens=max_new,
            temperature=config.temperature,
        )
        accepted = accept(rollout.texts, batch)
        keep = kept_rows(rollout.texts, accepted, config.num_generations, config.keep_per_prompt)
        queue += accepted_sequences(rollout, keep)
        sampled, accepted_total = sampled + len(batch), accepted_total + int(sum(a >= 1.0 for a in accepted))
        empty = 0 if keep else empty + 1
        if empty >= EMPTY_ROUNDS:
            runtime.log(
                f"rft: nothing accepted in {EMPTY_ROUNDS} rounds ({EMPTY_ROUNDS * len(batch)} samples); stopping. "
                "Start from a model that answers some prompts (e.g. after sft)"
            )
            break
        while len(queue) >= config.per_device_train_batch_size and not session.pace.expired():
            rows, queue = (
                queue[: config.per_device_train_batch_size],
                queue[config.per_device_train_batch_size :],
            )
            if not session.begin_step(optimizer):
                break
            step_number += 1
            lr = optimizer.param_groups[0]["lr"]
            ids, attention, mask, width = supervised_batch(
                rows, int(tokenizer.pad_token_id), op.device_of(model)
            )
            logits = op.completion_logits(model, ids, attention, width)
            nll = -(op.token_logprobs(logits, ids[:, -width:]) * mask).sum() / mask.sum().clamp(min=1)
            op.step(model, optimizer, nll, config.max_grad_norm)
            tokens += int(attention.sum())
            row = {
                "step": float(step_number),
                "loss": float(nll.detach()),
                "reward": accepted_total / sampled,  # the share of samples accepted so far
                "learning_rate": lr,
                "seconds": session.pace.elapsed,
            }
            history.append(row)
            if session.log_due(step_number):
                runtime.log(
                    f"rft step {session.of_steps(step_number)} loss {row['loss']:.4g} accepted "
                    f"{row['reward']:.3f} of {sampled} samples, lr {lr:.3g}"
                )
            sampled = accepted_total = 0
    return session.finish(
        "rft", history, tokens=tokens, reward_key="reward", extra={"samples_queued_unused": float(len(queue))}
    )


register_recipe(
    Recipe(
        name="rft",
        description="Rejection-sampling fine-tuning: sample from the model, keep what the benchmark's checker "
        "accepts, train on it (needs prompts and a checker, not answers).",
        config_class=RFTConfig,
        run=run,
    )
)
