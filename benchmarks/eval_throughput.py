"""Samples/second of grader.evaluation against a naive per-sample generate loop, same model and data.

    .venv/bin/python benchmarks/eval_throughput.py [--samples 300] [--benchmark arith] [--threads 1]

Builds a random model with tiny-arith's architecture (char tokenizer, 4 layers, hidden 128) in a temp folder, then
times both paths once on the first N test samples and prints the figures and the ratio (target: >= 5x on CPU).
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path
from typing import Any

import torch
from transformers import AutoTokenizer, LlamaConfig, LlamaForCausalLM

from grader.benchmarks import get_benchmark
from grader.checkpoint import load_model
from grader.config import EvalConfig
from grader.evaluation import build_prompts, cut_at_stop, evaluate
from trainers.tiny import TINY_RECIPE, build_char_tokenizer


def build_model(folder: Path) -> Path:
    tokenizer = build_char_tokenizer()
    tokenizer.model_max_length = 1024
    r = TINY_RECIPE
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=r.hidden_size,
        intermediate_size=r.intermediate_size,
        num_hidden_layers=r.num_hidden_layers,
        num_attention_heads=r.num_attention_heads,
        num_key_value_heads=r.num_key_value_heads,
        max_position_embeddings=1024,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    torch.manual_seed(0)
    LlamaForCausalLM(config).save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


@torch.inference_mode()
def naive_scores(
    model_dir: Path, prompts: list[str], benchmark_name: str, samples: list
) -> tuple[list[float], float]:
    """One model.generate call per sample: no batching, no early stop beyond EOS."""
    bench = get_benchmark(benchmark_name)
    tokenizer = AutoTokenizer.from_pretrained(str(model_dir))
    model: Any = load_model(model_dir)
    start = time.perf_counter()
    scores = []
    for prompt, sample in zip(prompts, samples, strict=True):
        enc = tokenizer(prompt, return_tensors="pt")
        out = model.generate(
            **enc,
            max_new_tokens=bench.max_new_tokens,
            do_sample=False,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
        text = str(tokenizer.decode(out[0, enc["input_ids"].shape[1] :], skip_special_tokens=True))
        scores.append(bench.score(cut_at_stop(text, bench.stop), sample))
    return scores, time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--samples", type=int, default=300)
    parser.add_argument("--benchmark", default="arith")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    bench = get_benchmark(args.benchmark)
    samples = bench.load("test")[: args.samples]
    config = EvalConfig(batch_size=args.batch_size)
    with tempfile.TemporaryDirectory() as tmp:
        model_dir = build_model(Path(tmp) / "model")
        evaluate(model_dir, samples[:8], bench, config)  # warm-up (imports, first kernels)
        t0 = time.perf_counter()
        fast = evaluate(model_dir, samples, bench, config)
        fast_wall = time.perf_counter() - t0
        naive, naive_seconds = naive_scores(
            model_dir, build_prompts(bench, samples, config), args.benchmark, samples
        )
    agree = sum(a == b for a, b in zip(fast.scores, naive, strict=True)) / len(naive)
    fast_rate = fast.n / fast.seconds
    naive_rate = len(naive) / naive_seconds
    print(
        f"benchmark={args.benchmark} samples={len(samples)} threads={args.threads} batch_size={args.batch_size}"
    )
    print(
        f"grader.evaluation : {fast_rate:8.1f} samples/s  ({fast.seconds:.2f}s generate+score, {fast_wall:.2f}s wall)"
    )
    print(f"naive per-sample  : {naive_rate:8.1f} samples/s  ({naive_seconds:.2f}s)")
    print(
        f"speed-up          : {fast_rate / naive_rate:8.1f}x  (target >= 5x); per-sample agreement {agree:.1%}"
    )


if __name__ == "__main__":
    main()
