"""What a trial costs above its training: its wall seconds by part, from the host's start to its validated checkpoint.

Runs a real loop per recipe (the fixed proposer, tiny-arith on arith, the local sandbox, `--trial-seconds` wall each)
and splits every trial's wall seconds (`TrialRecord.wall_s`, what `--max-compute-s` counts) into:

- host before: the host's work before the sandbox starts (the parent's digest checked, the config written);
- launch: the sandbox's and the interpreter's start; imports (torch, transformers, TRL...); model (load); data
  (read, tokenize); other (the trainer's set-up before its first step) -- the trainer's `startup_parts`;
- training (the trainer's own seconds), save (checkpoint and optimizer state);
- exit and seal: the trainer's exit, the host reading its metrics and sealing the checkpoint by its digest;
- validation: the host scoring the checkpoint on the public valid split.

Prints the median of each part over the trials, the fixed cost (wall - training; goal: under 2 s), and the run's
own wall seconds (what a user waits: the warm start's imports overlap work the run does anyway, and this shows
whether they really do), for each variant side by side: `cold` (each trial's sandbox started when its proposal is
final) and `warm` (`--trial-prewarm`: started while the previous trial is validated; agent.loop.prewarm).

    python benchmarks/trial_fixed_cost.py [--recipes sft,opo] [--variants cold,warm] [--loop-n 3]
        [--trial-seconds 20] [--home DIR]
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

PARTS = ("host before", "launch", "imports", "model", "data", "other", "training", "save", "exit and seal")


def trial_parts(trial: dict[str, Any]) -> dict[str, float]:
    """One trial's wall seconds by part (the trainer's figures for what happened inside its sandbox)."""
    metrics = trial.get("train_metrics") or {}
    parts = dict.fromkeys(PARTS, 0.0)
    startup = trial.get("startup_parts") or {}
    for name in ("launch", "imports", "model", "data", "other"):
        parts[name] = float(startup.get(name, 0.0))
    parts["training"] = float(metrics.get("train_seconds", 0.0))
    parts["save"] = float(metrics.get("save_seconds", 0.0))
    trainer_wall = float(metrics.get("wall_seconds", 0.0))
    inside = sum(parts[name] for name in ("launch", "imports", "model", "data", "other", "training", "save"))
    parts["host before"] = max(0.0, trainer_wall - inside)  # the trainer counts from the host's start
    parts["exit and seal"] = max(0.0, float(trial.get("duration_s", 0.0)) - trainer_wall)
    parts["validation"] = float(trial.get("validation_s", 0.0))
    return parts


def run_recipe(
    home: Path, recipe: str, loop_n: int, trial_seconds: float, prewarm: bool
) -> tuple[list[dict[str, Any]], float]:
    """One real loop of `loop_n` time-boxed trials of `recipe`: its trials (with their start-up parts) and the
    run's wall seconds from start to end (what the user waits)."""
    import json

    from agent.loop.driver import execute
    from agent.run.config import RunConfig
    from agent.run.reporting import Reporter
    from agent.status.runs import read_state

    run_id = f"fixed-cost-{recipe}-{'warm' if prewarm else 'cold'}-{int(time.time())}"
    config = RunConfig(
        home=home,
        run_id=run_id,
        loop_n=loop_n,
        timeout=3600,
        sandbox="local",
        quiet=True,
        proposer="fixed",
        recipes=recipe,
        trial_seconds=trial_seconds,
        trial_prewarm=prewarm,
    )
    started = time.monotonic()
    execute(config, reporter=Reporter(None, quiet=True))
    wall = time.monotonic() - started
    run_dir = home / "runs" / run_id
    trials = read_state(run_dir).get("trials", [])
    for (
        trial
    ) in trials:  # the trainer's start-up parts are in its metrics.json (a dict: not in train_metrics)
        metrics = run_dir / "trials" / trial["trial_id"] / "output" / "metrics.json"
        if metrics.is_file():
            trial["startup_parts"] = json.loads(metrics.read_text()).get("startup_parts") or {}
    return trials, wall


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--recipes", default="sft,opo")
    parser.add_argument("--loop-n", type=int, default=3)
    parser.add_argument("--trial-seconds", type=float, default=20.0, help="each trial's wall budget")
    parser.add_argument(
        "--variants",
        default="cold,warm",
        help="cold: each trial's sandbox started when its proposal is final; warm: started while the previous "
        "trial is validated (--trial-prewarm)",
    )
    parser.add_argument("--home", type=Path, default=None, help="RLLOOP_HOME (default: a temp dir)")
    args = parser.parse_args(argv)
    home = (args.home or Path(tempfile.mkdtemp(prefix="rlloop-fixed-cost-"))).resolve()
    from agent.run.models import resolve_base_model

    resolve_base_model("tiny-arith", home)  # built outside the measured runs
    columns = [(r, v) for r in args.recipes.split(",") for v in args.variants.split(",")]
    table: dict[tuple[str, str], dict[str, float]] = {}
    for recipe, variant in columns:
        trials, run_wall = run_recipe(home, recipe, args.loop_n, args.trial_seconds, variant == "warm")
        trials = [t for t in trials if t["status"] == "succeeded"]
        if not trials:
            raise SystemExit(f"no {recipe} trial succeeded ({variant}); see {home}/runs")
        parts = [trial_parts(t) for t in trials]
        row = {name: statistics.median(p[name] for p in parts) for name in parts[0]}
        walls = [float(t.get("wall_s") or 0.0) for t in trials]
        row["wall"] = statistics.median(walls)
        row["fixed cost"] = statistics.median(w - p["training"] for w, p in zip(walls, parts, strict=True))
        row["run wall"] = run_wall
        row["run training"] = sum(p["training"] for p in parts)
        table[(recipe, variant)] = row
    print(f"\ntrials of {args.trial_seconds:g} wall seconds, {args.loop_n} per run; medians over trials (s)")
    print(f"{'part':<16}" + "".join(f"{r + ' ' + v:>12}" for r, v in columns))
    for name in (*PARTS, "validation", "wall", "fixed cost", "run wall", "run training"):
        print(f"{name:<16}" + "".join(f"{table[c][name]:>12.2f}" for c in columns))
    print(
        "fixed cost = a trial's wall - its training (goal under 2 s); run wall: the whole run, start to end"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
