"""Training throughput of rlloop's `grpo` recipe and `opo` against TRL's GRPOTrainer used directly.

Same model, same prompts, same batch shape (prompts x generations), same completion budget, float32, TRL's default
gradient checkpointing for both TRL runs, one torch thread each (unless --threads): the figure is training tokens per second, where a token is any prompt or completion token the
step processed (TRL's `num_tokens`; OPO's attention-mask sum, counted the same way). Each contender runs --repeats
times; the script prints medians and the ratios to TRL (target: rlloop no slower than TRL, ratio >= 1.0).

    .venv/bin/python benchmarks/trainer_throughput.py [--model DIR] [--steps 8] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from grader.benchmarks import get_benchmark


def _write_train(path: Path, count: int) -> Path:
    samples = get_benchmark("arith").load("train")[:count]
    path.write_text(
        "".join(json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) + "\n" for s in samples)
    )
    return path


def _model(path: Path | None, scratch: Path) -> Path:
    if path is not None:
        return path
    from trainers.tiny import save_model_atomically, train_tiny_model

    print("building a briefly trained tiny-arith model (pass --model to reuse one)...", flush=True)
    model, tokenizer, _ = train_tiny_model(seed=0, steps=120, progress=False)
    return save_model_atomically(model, tokenizer, scratch / "model", {"name": "tiny-arith-bench"})


def _num_tokens(log_history: Sequence[Mapping[str, Any]]) -> float:
    values = [float(e["num_tokens"]) for e in log_history if isinstance(e.get("num_tokens"), int | float)]
    if not values:
        raise RuntimeError("TRL logged no num_tokens; cannot count training tokens")
    return max(values)


def run_trl_direct(model: Path, train: Path, out: Path, shape: dict[str, int]) -> tuple[float, float]:
    """TRL's GRPOTrainer with the reward function rlloop uses, no rlloop code in the loop."""
    from transformers import AutoModelForCausalLM, AutoTokenizer
    from trl import GRPOConfig, GRPOTrainer

    from trainers.data import prompt_answer_dataset
    from trainers.rewards import reward_functions

    args = GRPOConfig(
        output_dir=str(out),
        learning_rate=1e-4,
        max_steps=shape["steps"],
        per_device_train_batch_size=shape["batch"],
        num_generations=shape["generations"],
        max_completion_length=shape["max_new_tokens"],
        temperature=1.0,
        beta=0.0,
        num_iterations=1,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=not torch.cuda.is_available(),
        bf16=False,  # float32 like rlloop's recipes; TRL's default (bf16 on CPU) would be ~4x slower here
        disable_tqdm=True,
        seed=0,
    )
    trainer = GRPOTrainer(
        model=AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32),
        reward_funcs=reward_functions("arith"),  # type: ignore[arg-type]
        args=args,
        train_dataset=prompt_answer_dataset(train),
        processing_class=AutoTokenizer.from_pretrained(model),
    )
    started = time.perf_counter()
    trainer.train()
    return _num_tokens(trainer.state.log_history), time.perf_counter() - started


def run_rlloop_grpo(model: Path, train: Path, out: Path, shape: dict[str, int]) -> tuple[float, float]:
    from trainers.algorithms.grpo import GRPORecipeConfig, run_grpo

    config = GRPORecipeConfig(
        model_path=model,
        train_file=train,
        output_dir=out,
        learning_rate=1e-4,
        max_steps=shape["steps"],
        per_device_train_batch_size=shape["batch"],
        num_generations=shape["generations"],
        max_completion_length=shape["max_new_tokens"],
        logging_steps=1,
        torch_threads=torch.get_num_threads(),
    )
    result = run_grpo(config)
    history = [
        json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines() if line.strip()
    ]
    return _num_tokens(history), result.train_seconds


def run_rlloop_opo(model: Path, train: Path, out: Path, shape: dict[str, int]) -> tuple[float, float]:
    from trainers.algorithms.opo import OPOConfig, run

    config = OPOConfig(
        model_path=model,
        train_file=train,
        output_dir=out,
        learning_rate=1e-4,
        max_steps=shape["steps"],
        per_device_train_batch_size=shape["batch"],
        num_generations=shape["generations"],
        max_new_tokens=shape["max_new_tokens"],
        logging_steps=shape["steps"],
    )
    result = run(config)
    return float(result.extra["train_tokens"]), result.train_seconds


CONTENDERS: dict[str, Callable[[Path, Path, Path, dict[str, int]], tuple[float, float]]] = {
    "trl_grpo_direct": run_trl_direct,
    "rlloop_grpo": run_rlloop_grpo,
    "rlloop_opo": run_rlloop_opo,
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--model", type=Path, default=None, help="HF checkpoint folder (default: build tiny-arith)"
    )
    parser.add_argument("--steps", type=int, default=8)
    parser.add_argument("--batch", type=int, default=64, help="completions per step")
    parser.add_argument("--generations", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=6)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=1)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    shape = {
        "steps": args.steps,
        "batch": args.batch,
        "generations": args.generations,
        "max_new_tokens": args.max_new_tokens,
    }
    figures: dict[str, list[float]] = {name: [] for name in CONTENDERS}
    with tempfile.TemporaryDirectory(prefix="rlloop-throughput-") as tmp:
        scratch = Path(tmp)
        model = _model(args.model, scratch)
        train = _write_train(scratch / "train.jsonl", 512)
        for repeat in range(args.repeats):
            for name, fn in CONTENDERS.items():  # interleaved, so load drift hits every contender alike
                tokens, seconds = fn(model, train, scratch / f"{name}-{repeat}", shape)
                figures[name].append(tokens / seconds)
                print(
                    f"repeat {repeat + 1} {name}: {tokens:.0f} tokens in {seconds:.2f}s = {tokens / seconds:.0f} tok/s"
                )

    baseline = statistics.median(figures["trl_grpo_direct"])
    print()
    print(f"shape: {shape}, threads {args.threads}, repeats {args.repeats}")
    print(f"{'contender':<18} {'median tok/s':>12} {'vs TRL':>8}")
    for name, values in figures.items():
        median = statistics.median(values)
        print(f"{name:<18} {median:>12.0f} {median / baseline:>7.2f}x")


if __name__ == "__main__":
    main()
