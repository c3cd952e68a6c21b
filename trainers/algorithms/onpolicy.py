"""The plumbing the hand-written recipes (OPO, OPCD, GAD, coach, OEL) share: load, sample, score, save.

Kept as small functions over plain tensors so each recipe file reads as its paper's loop and nothing else.
A rollout is left-padded prompts followed by the sampled completion, so the completion occupies the same last
T columns whatever prompt (with or without context) it is re-scored under.
"""

from __future__ import annotations

import json
import os
import random
import shutil
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from pydantic import Field
from transformers import AutoModelForCausalLM, AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from grader.benchmarks import Sample, get_benchmark
from trainers.config import TrainerConfig
from trainers.quick_eval import accuracy, cut_at_stop

RewardFn = Callable[[Sequence[str], Sequence[Sample]], list[float]]


class OnPolicyConfig(TrainerConfig):
    """Fields of every recipe that samples from its own policy. `per_device_train_batch_size` counts completions
    per step and must be a multiple of `num_generations` (as TRL's GRPO)."""

    num_generations: int = Field(default=8, ge=1)
    max_new_tokens: int | None = Field(default=None, ge=1)  # default: the benchmark's evaluation budget
    temperature: float = Field(default=1.0, gt=0)
    max_grad_norm: float = Field(default=1.0, gt=0)
    eval_file: Path | None = None  # JSONL scored greedily before and after training (metrics.json)
    eval_samples: int = Field(default=200, ge=1)

    def prompts_per_step(self) -> int:
        if self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) must be a multiple of "
                f"num_generations ({self.num_generations}); change one of them"
            )
        return self.per_device_train_batch_size // self.num_generations


def seed_everything(seed: int) -> None:
    random.seed(seed)
    torch.manual_seed(seed)


def load_samples(path: Path, limit: int | None = None) -> list[Sample]:
    """Read a `{"id","prompt","answer"}` JSONL file; one clear error naming the file and line when it is wrong."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no such data file; point train_file/eval_file at a JSONL file")
    samples: list[Sample] = []
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
                samples.append(
                    Sample(
                        id=str(row.get("id", f"line-{number}")),
                        prompt=str(row["prompt"]),
                        answer=str(row["answer"]),
                    )
                )
            except (json.JSONDecodeError, KeyError, TypeError, AttributeError) as exc:
                raise ValueError(
                    f"{path}:{number}: expected a JSON object with 'prompt' and 'answer' ({exc})"
                ) from exc
            if limit is not None and len(samples) >= limit:
                break
    if not samples:
        raise ValueError(f"{path}: no samples; the file is empty")
    return samples


def load_policy(config: TrainerConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The trainable model (wrapped with LoRA adapters when `config.lora`) and its tokenizer."""
    tokenizer = AutoTokenizer.from_pretrained(config.model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(config.model_path, dtype=torch.float32)
    if config.lora:
        from peft import LoraConfig, get_peft_model

        lora = LoraConfig(
            r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
        )
        model = get_peft_model(model, lora)  # type: ignore[assignment]
    model.train()
    return model, tokenizer


def load_frozen(path: Path) -> PreTrainedModel:
    """A frozen copy of a checkpoint (the OPCD teacher), in eval mode with no gradients."""
    model = AutoModelForCausalLM.from_pretrained(path, dtype=torch.float32)
    model.eval()
    model.requires_grad_(False)
    return model


def benchmark_reward(name: str) -> RewardFn:
    """The benchmark's own scorer (after its stop strings), so training rewards agree with the grader."""
    benchmark = get_benchmark(name)

    def reward(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        return [
            float(benchmark.score(cut_at_stop(c, benchmark.stop), s))
            for c, s in zip(completions, samples, strict=True)
        ]

    return reward


def new_tokens_budget(config: OnPolicyConfig) -> int:
    return config.max_new_tokens or int(get_benchmark(config.benchmark).max_new_tokens)


@dataclass
class Rollout:
    """Sampled completions. `sequences` = left-padded prompt ids + completion ids; the completion is the last
    `completion_ids.shape[1]` columns. `completion_mask` keeps tokens up to and including the first EOS."""

    sequences: torch.Tensor
    attention_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)


def _completion_mask(completion_ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    if eos_token_id is None:
        return torch.ones_like(completion_ids)
    is_eos = completion_ids == eos_token_id
    width = completion_ids.shape[1]
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), torch.full_like(is_eos[:, 0], width).long())
    positions = torch.arange(width, device=completion_ids.device).unsqueeze(0)
    return (positions <= first_eos.unsqueeze(1)).long()


def encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask."""
    previous = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = previous
    return enc["input_ids"], enc["attention_mask"]


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    do_sample: bool = True,
) -> Rollout:
    """One completion per prompt (repeat prompts for groups), sampled from the current policy."""
    was_training = model.training
    model.eval()
    try:
        ids, mask = encode_prompts(tokenizer, prompts)
        generated = model.generate(
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            temperature=temperature if do_sample else None,
            top_k=0 if do_sample else None,
            top_p=1.0 if do_sample else None,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    finally:
        model.train(was_training)
    completion_ids = generated[:, ids.shape[1] :]
    completion_mask = _completion_mask(completion_ids, tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(completion_ids * completion_mask, skip_special_tokens=True)
    return Rollout(
        sequences=generated,
        attention_mask=torch.cat([mask, completion_mask], dim=1),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        texts=texts,
    )


def with_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], completion_ids: torch.Tensor, completion_mask: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same completions behind different prompts (e.g. context + prompt for a teacher)."""
    ids, mask = encode_prompts(tokenizer, prompts)
    return torch.cat([ids, completion_ids], dim=1), torch.cat([mask, completion_mask], dim=1)


def completion_logits(
    model: PreTrainedModel, sequences: torch.Tensor, attention_mask: torch.Tensor, completion_width: int
) -> torch.Tensor:
    """Logits [B, T, V] that predict the last `completion_width` tokens; positions count only real tokens."""
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids).logits
    start = sequences.shape[1] - completion_width
    return logits[:, start - 1 : -1, :]


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log p(token) at each position, [B, T]."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def optimizer_for(model: torch.nn.Module, learning_rate: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)


def step(model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float) -> None:
    """Backward, clip, one optimiser step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()


class Clock:
    """Training-time budget: `expired()` once `max_seconds` of wall time have passed (None = never)."""

    def __init__(self, max_seconds: float | None) -> None:
        self.start = time.perf_counter()
        self.max_seconds = max_seconds

    @property
    def elapsed(self) -> float:
        return time.perf_counter() - self.start

    def expired(self) -> bool:
        return self.max_seconds is not None and self.elapsed >= self.max_seconds


def batches(samples: Sequence[Sample], size: int, seed: int) -> Callable[[], list[Sample]]:
    """An endless shuffled stream of `size`-sample batches (reshuffled each epoch)."""
    rng = random.Random(seed)
    order: list[int] = []

    def next_batch() -> list[Sample]:
        while len(order) < size:
            fresh = list(range(len(samples)))
            rng.shuffle(fresh)
            order.extend(fresh)
        picked = [samples[i] for i in order[:size]]
        del order[:size]
        return picked

    return next_batch


def evaluate(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: OnPolicyConfig) -> float | None:
    """Greedy accuracy on the first `eval_samples` of `eval_file`; None when no eval file is configured."""
    if config.eval_file is None:
        return None
    samples = load_samples(config.eval_file, config.eval_samples)
    return accuracy(model, tokenizer, samples, get_benchmark(config.benchmark))


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


def save_checkpoint(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, output_dir: Path, metrics: dict[str, Any]
) -> Path:
    """Save an HF checkpoint (LoRA merged into the weights) and metrics.json into `output_dir`.

    Everything is written to a staging folder first and moved in file by file; metrics.json goes last, so its
    presence means the checkpoint is complete.
    """
    if hasattr(model, "merge_and_unload"):
        model = model.merge_and_unload()
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=output_dir))
    try:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        (staging / "metrics.json").write_text(json.dumps(metrics, indent=2, default=str) + "\n")
        for item in sorted(staging.iterdir(), key=lambda p: p.name == "metrics.json"):
            os.replace(item, output_dir / item.name)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return output_dir
