"""Does the default SFT trial lift tiny-arith enough, fast enough? (Target: >= +20 points in about a minute.)

    .venv/bin/python benchmarks/sft_lift.py [--out DIR] [--threads 1] [--grpo-steps 0]

Builds tiny-arith (timed), measures its greedy accuracy on arith valid and test, runs `python -m trainers sft` with
the recipe's defaults on the full train split (timed, as the sandbox would), and measures again. With --grpo-steps N
it then runs N GRPO steps from the SFT checkpoint and prints the first and last logged mean reward.
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from grader.benchmarks import get_benchmark
from trainers.quick_eval import checkpoint_accuracy
from trainers.tiny import build_tiny_arith

REPO = Path(__file__).resolve().parents[1]


def _accuracies(path: Path) -> str:
    valid = checkpoint_accuracy(path, "arith", "valid")
    test = checkpoint_accuracy(path, "arith", "test")
    return f"valid {valid:.3f}  test {test:.3f}"


def _run_recipe(
    recipe: str, config: dict[str, object], work: Path, threads: int
) -> tuple[float, dict[str, object]]:
    config_path = work / f"{recipe}.json"
    config_path.write_text(json.dumps(config))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(threads)}
    started = time.perf_counter()
    subprocess.run(
        [sys.executable, "-m", "trainers", recipe, "--config", str(config_path)], env=env, check=True
    )
    wall = time.perf_counter() - started
    return wall, json.loads((Path(str(config["output_dir"])) / "metrics.json").read_text())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--grpo-steps", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = args.out or Path(tempfile.mkdtemp(prefix="sft-lift-"))
    work.mkdir(parents=True, exist_ok=True)

    started = time.perf_counter()
    base = build_tiny_arith(work / "tiny-arith", progress=False)
    print(f"tiny-arith build: {time.perf_counter() - started:.1f}s")
    print(f"tiny-arith:       {_accuracies(base)}")

    train = work / "train.jsonl"
    with train.open("w") as fh:
        for s in get_benchmark("arith").load("train"):
            fh.write(json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) + "\n")
    sft_out = work / "sft"
    wall, metrics = _run_recipe(
        "sft",
        {
            "model_path": str(base),
            "train_file": str(train),
            "output_dir": str(sft_out),
            "torch_threads": args.threads,
        },
        work,
        args.threads,
    )
    print(f"sft (defaults):   {_accuracies(sft_out)}")
    print(f"sft time:         train {metrics['train_seconds']}s, wall {wall:.1f}s, steps {metrics['steps']}")

    if args.grpo_steps:
        grpo_out = work / "grpo"
        wall, metrics = _run_recipe(
            "grpo",
            {
                "model_path": str(sft_out),
                "train_file": str(train),
                "output_dir": str(grpo_out),
                "max_steps": args.grpo_steps,
                "torch_threads": args.threads,
            },
            work,
            args.threads,
        )
        print(f"grpo from sft:    {_accuracies(grpo_out)}")
        print(
            f"grpo reward:      first {metrics['reward_first']} -> last {metrics['reward_mean']}, "
            f"train {metrics['train_seconds']}s, wall {wall:.1f}s, steps {metrics['steps']}"
        )


if __name__ == "__main__":
    main()
