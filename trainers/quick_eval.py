"""Fast greedy accuracy of a checkpoint on a benchmark split: for calibrating recipes and for tests.

Not the grader's scorer (that lives in grader/ and is authoritative); it applies the benchmark's own stop strings and
`score`, so its figures agree with the grader's for greedy decoding.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import torch
from transformers import AutoTokenizer, PreTrainedModel, PreTrainedTokenizerBase

from tasks import Benchmark, Sample, get_benchmark
from tasks.base import stop_strings
from trainers.rewards import cut_at_stop

__all__ = ["accuracy", "checkpoint_accuracy", "cut_at_stop", "greedy_completions"]


@torch.inference_mode()
def greedy_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    batch_size: int = 256,
) -> list[str]:
    """Greedy completions for `prompts`, batched with left padding (the tokenizer's side is restored after)."""
    previous_side = tokenizer.padding_side
    tokenizer.padding_side = "left"
    was_training = model.training
    model.eval()
    out: list[str] = []
    try:
        for start in range(0, len(prompts), batch_size):
            chunk = list(prompts[start : start + batch_size])
            enc = tokenizer(chunk, return_tensors="pt", padding=True).to(next(model.parameters()).device)
            generated = model.generate(  # type: ignore[operator]
                **enc,
                max_new_tokens=max_new_tokens,
                do_sample=False,
                pad_token_id=tokenizer.pad_token_id,
                eos_token_id=tokenizer.eos_token_id,
            )
            new_tokens = generated[:, enc["input_ids"].shape[1] :]
            out.extend(tokenizer.batch_decode(new_tokens, skip_special_tokens=True))
    finally:
        tokenizer.padding_side = previous_side
        model.train(was_training)
    return out


def accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    *,
    batch_size: int = 256,
    prompt_format: str = "plain",
) -> float:
    """Mean of the benchmark's score over `samples` under greedy decoding, cut as the grader cuts `prompt_format`."""
    if not samples:
        raise ValueError("no samples to evaluate; pass a non-empty split or subset")
    completions = greedy_completions(
        model,
        tokenizer,
        [s.prompt for s in samples],
        max_new_tokens=benchmark.max_new_tokens,
        batch_size=batch_size,
    )
    stop = stop_strings(benchmark, prompt_format)
    scores = [benchmark.score(cut_at_stop(c, stop), s) for c, s in zip(completions, samples, strict=True)]
    return sum(scores) / len(scores)


def checkpoint_accuracy(
    model_path: Path, benchmark_name: str = "arith", split: str = "valid", limit: int | None = None
) -> float:
    """Load a checkpoint folder and return its greedy accuracy on the first `limit` samples of `split`."""
    benchmark = get_benchmark(benchmark_name)
    samples = benchmark.load(split)  # type: ignore[arg-type]
    if limit is not None:
        samples = samples[:limit]
    from trainers.device import load_causal_lm

    tokenizer = AutoTokenizer.from_pretrained(model_path)
    model = load_causal_lm(model_path)
    return accuracy(model, tokenizer, samples, benchmark)
