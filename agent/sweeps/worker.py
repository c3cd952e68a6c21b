"""One sweep run in its own process: start it, resume it, or recognise it as done; write what happened.

`python -m agent.sweeps.worker '<payload json>'` (payload: `WorkerPayload`). The outcome goes, atomically, to
RLLOOP_HOME/sweeps/<sweep_id>/outcomes/<run_id>.json, which the driver reads once the process has exited.
"""

from __future__ import annotations

import json
import sys
import traceback
from typing import Any, Literal

from agent.run import RunPaths
from agent.sweeps.outcomes import Outcome, RunAddress, outcome_path
from agent.sweeps.spec import Combination, SweepSpec
from tasks.atomic import atomic_write_json

FINAL_STATUSES = ("finished", "terminated")


class WorkerPayload(RunAddress):
    combination: Combination
    spec: SweepSpec


def finished_summary(paths: RunPaths) -> dict[str, Any] | None:
    """The summary of a run that ended for good (not one that was interrupted)."""
    try:
        summary = json.loads((paths.run_dir / "summary.json").read_text())
    except (OSError, ValueError):
        return None
    return summary if summary.get("status") in FINAL_STATUSES else None


def run_combination(payload: WorkerPayload) -> Outcome:
    """Run the combination to its end: skip a finished run, resume a started one, else start it."""
    from agent.launch import launch
    from agent.run import RunConfig

    paths = RunPaths(payload.home.resolve(), payload.run_id)
    done = finished_summary(paths)
    if done is not None:
        return Outcome(run_id=payload.run_id, status="finished", action="skipped", summary=done)
    config = RunConfig(**payload.spec.run_config_fields(payload.combination, payload.run_id, paths.home))
    combination = payload.combination
    started = (paths.run_json if combination.is_external else paths.checkpoints_db).exists()
    summary = launch(
        config,
        resume_run_id=payload.run_id if started else None,
        external_agent=combination.agent if combination.is_external else None,
    )
    status: Literal["finished", "interrupted"] = (
        "interrupted" if summary.get("status") == "interrupted" else "finished"
    )
    return Outcome(
        run_id=payload.run_id, status=status, action="resumed" if started else "started", summary=summary
    )


def main(argv: list[str]) -> int:
    payload = WorkerPayload.model_validate_json(argv[0])
    target = outcome_path(payload.home, payload.sweep_id, payload.run_id)
    try:
        outcome = run_combination(payload)
    except KeyboardInterrupt:
        outcome = Outcome(run_id=payload.run_id, status="interrupted", action="started", error="SIGINT")
    except Exception as exc:
        traceback.print_exc()
        line = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        outcome = Outcome(run_id=payload.run_id, status="failed", action="started", error=line[:500])
    atomic_write_json(target, outcome.model_dump(mode="json"))
    return {"finished": 0, "interrupted": 130}.get(outcome.status, 1)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
