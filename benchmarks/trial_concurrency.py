"""Wall time of one research run with `--trial-concurrency 1` vs `K`: do K trials at once finish K times sooner?

Runs the same real loop twice (tiny-arith on arith, built-in tree proposer, local sandbox, a fixed step count,
every checkpoint graded), once one trial at a time and once K at a time, and prints each run's wall time, its
training wall time (per step, the longest trial of the step: what concurrency can shorten) and the ratios. Grading,
validation and the baseline stay sequential, so the whole run's ratio is above the training ratio. The machine's
load average is printed with the figures: on a shared machine it decides the result.

    python benchmarks/trial_concurrency.py [--loop-n 4] [--k 2] [--trial-steps 25] [--repeat 1] [--home DIR]
"""

from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

from agent.loop.driver import execute
from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.status.runs import read_state


def one_run(home: Path, k: int, args: argparse.Namespace) -> dict[str, Any]:
    run_id = f"concurrency-k{k}-{int(time.time())}"
    config = RunConfig.model_validate(
        {
            "home": home,
            "run_id": run_id,
            "loop_n": args.loop_n,
            "trial_concurrency": k,
            "trial_steps": args.trial_steps,
            "eval_limit": args.eval_limit,
            "public_fraction": 0.0,
            "timeout": 3600,
            "sandbox": args.sandbox,
            "submit": "all",
            "quiet": True,
        }
    )
    load = os.getloadavg()[0]
    started = time.monotonic()
    execute(config, reporter=Reporter(None, quiet=True))
    wall = time.monotonic() - started
    trials = read_state(home / "runs" / run_id).get("trials", [])
    durations = [float(t.get("duration_s", 0.0)) for t in trials]
    steps = [durations[i : i + k] for i in range(0, len(durations), k)]  # the loop's steps: K trials each
    return {
        "k": k,
        "trials": len(trials),
        "distinct": len(
            {
                (t["proposal"]["recipe"], t["proposal"]["parent"], str(t["proposal"]["hyperparameters"]))
                for t in trials
            }
        ),
        "wall": wall,
        "training": sum(max(s) for s in steps if s),
        "trial_sum": sum(durations),
        "load": (load + os.getloadavg()[0]) / 2,
    }


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loop-n", type=int, default=4)
    parser.add_argument("--k", type=int, default=2)
    parser.add_argument("--trial-steps", type=int, default=25)
    parser.add_argument("--eval-limit", type=int, default=120)
    parser.add_argument("--sandbox", default="local")
    parser.add_argument("--repeat", type=int, default=1, help="pairs of runs (the order alternates)")
    parser.add_argument(
        "--home", type=Path, default=None, help="RLLOOP_HOME (default: a temp dir; tiny-arith is built)"
    )
    args = parser.parse_args()
    home = (args.home or Path(tempfile.mkdtemp(prefix="rlloop-bench-"))).resolve()
    os.environ.setdefault("RLLOOP_TEST_SEED", "20261201")  # one hidden test set for both runs
    from agent.run.models import resolve_base_model

    resolve_base_model("tiny-arith", home)  # built outside the timed region
    print(f"{os.cpu_count()} cores; {args.loop_n} trials of {args.trial_steps} steps; {args.repeat} pair(s)")
    runs: dict[int, list[dict[str, Any]]] = {1: [], args.k: []}
    for i in range(args.repeat):  # alternate the order (1, K, K, 1, ...) so a drifting load hits both alike
        for k in (1, args.k) if i % 2 == 0 else (args.k, 1):
            r = one_run(home, k, args)
            runs[k].append(r)
            print(
                f"K={r['k']}: {r['trials']} trials ({r['distinct']} distinct), run wall {r['wall']:7.1f} s, "
                f"training wall {r['training']:7.1f} s, sum of trial times {r['trial_sum']:7.1f} s, "
                f"load avg {r['load']:.1f}",
                flush=True,
            )
    one, k = (statistics.median(r["wall"] for r in runs[x]) for x in (1, args.k))
    one_t, k_t = (statistics.median(r["training"] for r in runs[x]) for x in (1, args.k))
    print(
        f"median ratio K={args.k} / K=1: run wall {k / one:.2f}, training wall {k_t / one_t:.2f} "
        f"(ideal {1 / args.k:.2f})"
    )


if __name__ == "__main__":
    main()
