"""How much of a research run's wall time goes to the loop itself rather than to training and evaluation.

Runs a real short loop (tiny-arith on arith, built-in proposer, local sandbox) and splits its wall time into:
training (the trial processes), evaluation (grader start with baseline, and every submission's grading) and the rest
(workspace, proposing, MLflow, checkpointing, process start-up of the loop). Target: the rest under 10%.

    python benchmarks/loop_overhead.py [--loop-n 3] [--home DIR]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from pathlib import Path

from agent.loop.driver import execute
from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.status.runs import read_state


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--loop-n", type=int, default=3)
    parser.add_argument(
        "--home", type=Path, default=None, help="RLLOOP_HOME (default: a temp dir; tiny-arith is built)"
    )
    parser.add_argument("--sandbox", default="local")
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="rlloop-bench-"))
    config = RunConfig(home=home, loop_n=args.loop_n, timeout=1800, sandbox=args.sandbox, quiet=True)
    run_id = f"overhead-{int(time.time())}"
    config.run_id = run_id
    from agent.run.models import resolve_base_model

    resolve_base_model("tiny-arith", home.resolve())  # build outside the timed region
    started = time.monotonic()
    execute(config, reporter=Reporter(None, quiet=True))
    wall = time.monotonic() - started
    state = read_state(home.resolve() / "runs" / run_id)
    trials = state.get("trials", [])
    training = sum(float(t.get("duration_s", 0.0)) for t in trials)
    trainer_reported = sum(float(t.get("train_metrics", {}).get("train_seconds", 0.0)) for t in trials)
    grading = sum(float((t.get("grading") or {}).get("wall_s", 0.0)) for t in trials)
    baseline = float((state.get("timings") or {}).get("grader_start_s", 0.0))
    rest = (
        wall - training - grading - baseline
    )  # includes finalisation (private-split scoring) and bookkeeping
    print(f"trials                      {len(trials)}")
    print(f"run wall time               {wall:8.1f} s")
    print(
        f"  training (trial procs)    {training:8.1f} s  ({training / wall:6.1%})  of which trainer-reported {trainer_reported:.1f} s"
    )
    print(f"  evaluation (baseline)     {baseline:8.1f} s  ({baseline / wall:6.1%})")
    print(f"  evaluation (submissions)  {grading:8.1f} s  ({grading / wall:6.1%})")
    print(f"  loop overhead (the rest)  {rest:8.1f} s  ({rest / wall:6.1%})  target < 10%")


if __name__ == "__main__":
    main()
