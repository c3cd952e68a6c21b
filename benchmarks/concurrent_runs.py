"""Many research loops on one RLLOOP_HOME at once: K separate `rlloop run` processes started together on a fresh
home (nothing built, no MLflow store yet), for K = 1, 2, 4, 8 by default.

    python benchmarks/concurrent_runs.py [--k 1,2,4,8] [--sandbox local] [--trial-steps 20]

Prints per K: runs finished, failures (goal 0), results rows written, MLflow parent runs, how many processes built
the base model (goal 1), and the median wall time per run against K=1 (the machine's cores are shared, so it grows
with K; failures must not). Each K uses its own fresh home, so every K races for the first-use steps.
"""

from __future__ import annotations

import argparse
import csv
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def run_k(k: int, args: argparse.Namespace) -> dict[str, float]:
    with tempfile.TemporaryDirectory(prefix=f"rlloop-k{k}-") as tmp:
        home = Path(tmp) / "home"
        env = {**os.environ, "RLLOOP_HOME": str(home), "OMP_NUM_THREADS": "1"}
        command = [
            sys.executable, "-m", "agent.cli", "run", "--loop-n", "1", "--trial-steps", str(args.trial_steps),
            "--eval-limit", "40", "--sandbox", args.sandbox, "--quiet", "--test-seed", "1",
        ]  # fmt: skip
        started = time.monotonic()
        procs = [
            subprocess.Popen(
                [*command, "--run-id", f"k{k}-{i}"],
                env=env,
                cwd=REPO,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                text=True,
            )
            for i in range(k)
        ]
        walls: list[float] = []
        failures = 0
        for proc in procs:
            _, err = proc.communicate()
            walls.append(time.monotonic() - started)
            if proc.returncode != 0:
                failures += 1
                print(f"  K={k}: a run failed (exit {proc.returncode}): {err.strip().splitlines()[-1:]}")
        rows = list(csv.DictReader((home / "results.csv").open())) if (home / "results.csv").exists() else []
        builds = sum(
            (run / "run.log").read_text().count("building the built-in model tiny-arith")
            for run in (home / "runs").iterdir()
            if (run / "run.log").exists()
        )
        return {
            "finished": k - failures,
            "failures": failures,
            "rows": len(rows),
            "parents": _parents(home),
            "builds": builds,
            "wall": statistics.median(walls),
        }


def _parents(home: Path) -> int:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    experiments = client.search_experiments()
    runs = client.search_runs(
        [e.experiment_id for e in experiments], filter_string="tags.`rlloop.kind` = 'parent'"
    )
    return len(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--k", default="1,2,4,8")
    parser.add_argument("--sandbox", default="local")
    parser.add_argument("--trial-steps", type=int, default=20)
    args = parser.parse_args()
    ks = [int(k) for k in args.k.split(",")]
    results = {k: run_k(k, args) for k in ks}
    base = results[ks[0]]["wall"]
    print(
        f"{'K':>3} {'finished':>8} {'failures':>8} {'rows':>5} {'mlflow':>6} {'builds':>6} {'wall/run':>9} {'vs K=1':>7}"
    )
    for k, r in results.items():
        print(
            f"{k:>3} {r['finished']:>8.0f} {r['failures']:>8.0f} {r['rows']:>5.0f} {r['parents']:>6.0f} "
            f"{r['builds']:>6.0f} {r['wall']:>8.1f}s {r['wall'] / base:>6.2f}x"
        )


if __name__ == "__main__":
    main()
