"""Can a trial teach tiny-arith a multi-turn game? SFT on the expert's turns, then the grader plays held-out games.

    .venv/bin/python benchmarks/game_sft.py [--benchmark frozenlake] [--steps 1000,2000] [--lr 2e-3] [--games 200]

Builds tiny-arith, plays the held-out games with it (the baseline), then for each step count runs
`python -m trainers sft` on the benchmark's train split (the expert's turns, as a trial's workspace holds them) and
plays the games again. Prints success rate with its 95% CI, replies per game, and the per-turn accuracy on valid.
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
from grader.config import EvalConfig
from grader.evaluation import evaluate
from trainers.quick_eval import checkpoint_accuracy
from trainers.tiny import build_tiny_arith

REPO = Path(__file__).resolve().parents[1]


def _play(path: Path, benchmark_name: str, games: int) -> str:
    bench = get_benchmark(benchmark_name)
    result = evaluate(path, bench.load("test")[:games], bench, EvalConfig(batch_size=256))
    turns = sorted(result.turns)
    per_turn = checkpoint_accuracy(path, benchmark_name, "valid")
    return (
        f"success {result.score:.3f} (95% CI {result.ci_low:.3f}-{result.ci_high:.3f}, n={result.n}), "
        f"median replies {turns[len(turns) // 2]}, valid per-turn accuracy {per_turn:.3f}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--benchmark", default="frozenlake")
    parser.add_argument(
        "--steps", default="1000,2000", help="comma list of SFT step counts, each from the base"
    )
    parser.add_argument("--lr", type=float, default=2e-3)
    parser.add_argument("--games", type=int, default=200)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=None)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    work = args.out or Path(tempfile.mkdtemp(prefix="game-sft-"))
    work.mkdir(parents=True, exist_ok=True)

    base = build_tiny_arith(work / "tiny-arith", progress=False)
    print(f"{args.benchmark} base tiny-arith: {_play(base, args.benchmark, args.games)}", flush=True)
    train = work / "train.jsonl"
    with train.open("w") as fh:
        for s in get_benchmark(args.benchmark).load("train"):
            fh.write(s.model_dump_json(include={"id", "prompt", "answer"}) + "\n")
    for steps in [int(s) for s in args.steps.split(",")]:
        out = work / f"sft-{steps}"
        config = {
            "model_path": str(base),
            "train_file": str(train),
            "output_dir": str(out),
            "benchmark": args.benchmark,
            "learning_rate": args.lr,
            "max_steps": steps,
            "torch_threads": args.threads,
        }
        (work / f"sft-{steps}.json").write_text(json.dumps(config))
        env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": str(args.threads)}
        started = time.perf_counter()
        subprocess.run(
            [sys.executable, "-m", "trainers", "sft", "--config", str(work / f"sft-{steps}.json")],
            env=env,
            check=True,
            stdout=subprocess.DEVNULL,
        )
        wall = time.perf_counter() - started
        print(
            f"{args.benchmark} sft {steps} steps ({wall:.0f}s): {_play(out, args.benchmark, args.games)}",
            flush=True,
        )


if __name__ == "__main__":
    main()
