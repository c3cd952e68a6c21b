"""Does the search-tree policy find better checkpoints than the greedy cascade or random search, for the same compute?

    .venv/bin/python benchmarks/search_policy.py [--quick] [--benchmarks frozenlake,countdown]
        [--policies tree,greedy,random] [--seeds 3] [--loop-n 6] [--trial-steps 200] [--recipes sft,grpo]

Each (benchmark, policy, seed) is one real `rlloop run` (built-in base model tiny-arith, local sandbox, the default
submission policy `improved`) in a subprocess, all on one hidden test set (`--test-seed`). Every policy gets the same
budget: `--loop-n` trials of `--trial-steps` steps each over the same recipe list (a policy that stops early spends
less). Per run it reads the grader's final numbers (summary.json) and the loop's state: the best checkpoint's
private score (chosen on the public half, scored on the private half it never saw), the submissions used, and the
compute seconds (trial durations) until the trial that became best. Prints one line per benchmark and policy:
mean ± standard error over seeds. `--quick`: one seed, 3 SFT trials of 30 steps, 60 test samples: a smoke check
that the three policies run end to end, too small to rank them.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.run.status import read_state

REPO = Path(__file__).resolve().parents[1]


def _run(
    home: Path, run_id: str, benchmark: str, policy: str, seed: int, args: argparse.Namespace
) -> dict[str, Any]:
    command = [
        sys.executable, "-m", "agent.cli", "run", "--run-id", run_id, "--benchmark", benchmark,
        "--proposer", policy, "--seed", str(seed), "--loop-n", str(args.loop_n),
        "--trial-steps", str(args.trial_steps), "--recipes", args.recipes, "--eval-limit", str(args.eval_limit),
        "--test-seed", str(args.test_seed), "--sandbox", args.sandbox, "--timeout", "2h", "--quiet",
    ]  # fmt: skip
    env = {**os.environ, "RLLOOP_HOME": str(home), "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1")}
    started = time.monotonic()
    done = subprocess.run(command, env=env, capture_output=True, text=True, cwd=REPO)
    wall = time.monotonic() - started
    run_dir = home / "runs" / run_id
    if done.returncode != 0 or not (run_dir / "summary.json").exists():
        tail = (done.stdout + done.stderr)[-600:]
        raise RuntimeError(f"{run_id} failed (exit {done.returncode}): {tail}")
    summary = json.loads((run_dir / "summary.json").read_text())
    state = read_state(run_dir)
    return _figures(summary, state, wall)


def _figures(summary: dict[str, Any], state: dict[str, Any], wall: float) -> dict[str, Any]:
    grader = summary.get("grader") or {}
    trials = state.get("trials", [])
    best_id = state.get("best_trial_id")
    spent, to_best = 0.0, None
    for trial in trials:
        spent += float(trial.get("duration_s") or 0.0)
        if trial["trial_id"] == best_id:
            to_best = spent
    return {
        "private": grader.get(
            "final_private_score"
        ),  # the private baseline when nothing beat it (grader.figures)
        "baseline_private": grader.get("baseline_private_score"),
        "submissions": summary.get("submissions", 0),
        "trials": len(trials),
        "time_to_best_s": to_best if to_best is not None else 0.0,
        "compute_s": spent,
        "wall_s": round(wall, 1),
        "stop_reason": summary.get("stop_reason"),
    }


def _mean_se(values: list[float]) -> str:
    if not values:
        return "n/a"
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) > 1 else float("nan")
    return f"{mean:.3f} ± {se:.3f}" if se == se else f"{mean:.3f} ± n/a"


def _line(benchmark: str, policy: str, runs: list[dict[str, Any]]) -> str:
    private = [float(r["private"]) for r in runs if r["private"] is not None]
    base = [float(r["baseline_private"]) for r in runs if r["baseline_private"] is not None]
    subs = [float(r["submissions"]) for r in runs]
    trials = [float(r["trials"]) for r in runs]
    to_best = [float(r["time_to_best_s"]) for r in runs]
    base_text = f"{statistics.fmean(base):.3f}" if base else "n/a"
    return (
        f"{benchmark:<11} {policy:<7} best private {_mean_se(private)} (baseline {base_text}, n={len(runs)})  "
        f"submissions {_mean_se(subs)} of trials {_mean_se(trials)}  time to best {_mean_se(to_best)} s"
    )


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--quick", action="store_true", help="one seed, 3 SFT trials of 30 steps, 60 test samples"
    )
    parser.add_argument("--benchmarks", default="frozenlake,countdown")
    parser.add_argument("--policies", default="tree,greedy,random")
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--loop-n", type=int, default=6)
    parser.add_argument("--trial-steps", type=int, default=200)
    parser.add_argument("--recipes", default="sft,grpo", help="the recipe space every policy searches")
    parser.add_argument("--eval-limit", type=int, default=200, help="hidden test samples the grader scores")
    parser.add_argument("--test-seed", type=int, default=20261201, help="one hidden test set for every run")
    parser.add_argument("--sandbox", default="local")
    parser.add_argument("--home", type=Path, default=None, help="RLLOOP_HOME (default: a temp dir)")
    parser.add_argument("--out", type=Path, default=None, help="write every run's figures as JSON here")
    args = parser.parse_args()
    if args.quick:
        args.seeds, args.loop_n, args.trial_steps, args.eval_limit = 1, 3, 30, 60
        args.recipes = "sft"
    home = (args.home or Path(tempfile.mkdtemp(prefix="rlloop-search-"))).resolve()
    from agent.run.models import resolve_base_model

    resolve_base_model("tiny-arith", home)  # built once, outside the measured runs
    stamp = time.strftime("%H%M%S")
    results: dict[str, dict[str, list[dict[str, Any]]]] = {}
    lines = []
    for benchmark in args.benchmarks.split(","):
        for policy in args.policies.split(","):
            runs = []
            for seed in range(args.seeds):
                run_id = f"sp-{stamp}-{benchmark}-{policy}-{seed}"
                figures = _run(home, run_id, benchmark, policy, seed, args)
                print(f"  {run_id}: {json.dumps(figures)}", flush=True)
                runs.append(figures)
            results.setdefault(benchmark, {})[policy] = runs
            lines.append(_line(benchmark, policy, runs))
            print(lines[-1], flush=True)
    print("\n".join(["", *lines]))
    if args.out:
        args.out.write_text(
            json.dumps({"args": vars(args) | {"home": str(home)}, "runs": results}, default=str)
        )


if __name__ == "__main__":
    main()
