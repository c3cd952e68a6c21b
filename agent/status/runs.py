"""What every run under RLLOOP_HOME is doing: read from its checkpoint, summary and pid file, never guessed."""

from __future__ import annotations

import json
import sqlite3
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from langgraph.checkpoint.serde.jsonplus import JsonPlusSerializer
from langgraph.checkpoint.sqlite import SqliteSaver
from pydantic import BaseModel
from pydantic_core import to_jsonable_python

from agent.core import BaselineScore, TrialRecord
from agent.status.headline import Headline, run_headline
from tasks import procfs


@dataclass
class RunRow:
    """One run as `rlloop runs` and the service's list show it. `baseline` and `best` are on the public half (what
    the run chose by); `headline` says both halves in words once the run ended (`agent.status.headline`)."""

    run_id: str
    benchmark: str
    base_model: str
    status: str
    baseline: float | None
    best: float | None
    submissions: int
    trials: int
    best_trial_id: str | None = None
    error: str | None = None  # why it failed (summary.json's `error`), for a failed run
    headline: Headline | None = None

    @staticmethod
    def fmt(value: float | None) -> str:
        return "" if value is None else f"{value:.3f}"

    def as_dict(self) -> dict[str, Any]:
        return {**self.__dict__, "headline": self.headline.model_dump() if self.headline else None}


def pid_alive(pid_file: Path) -> bool:
    """Whether the process in `pid_file` runs (`tasks.procfs`: a zombie does not)."""
    try:
        pid = int(pid_file.read_text().strip())
    except (OSError, ValueError):
        return False
    return procfs.alive(pid)


# The classes a loop's checkpoint holds besides plain data (the typed fields of `agent.loop.graph.LoopState`), and so
# the only ones revived when it is read: any other class a checkpoint file names comes back as its plain data.
CHECKPOINT_RECORDS: tuple[type[BaseModel], ...] = (TrialRecord, BaselineScore)


def open_checkpoints(db: Path, *, read_only: bool = False) -> SqliteSaver:
    """The loop's checkpointer on a run's SQLite file (`RunPaths.checkpoints_db`), reviving its records as objects:
    what a run resumes from, and what `read_state` reads."""
    conn = (
        sqlite3.connect(f"file:{db}?mode=ro", uri=True, check_same_thread=False)
        if read_only
        else sqlite3.connect(str(db), check_same_thread=False)
    )
    return SqliteSaver(conn, serde=JsonPlusSerializer(allowed_msgpack_modules=CHECKPOINT_RECORDS))


def read_state(run_dir: Path) -> dict[str, Any]:
    """The loop's last checkpointed state as plain JSON data (each record as its JSON dump): what the run pages,
    `rlloop runs` and sweeps read, in a process that never runs the loop."""
    db = run_dir / "checkpoints.db"
    if not db.exists():
        return {}
    saver = open_checkpoints(db, read_only=True)
    try:
        found = saver.get_tuple({"configurable": {"thread_id": run_dir.name}})
        return dict(to_jsonable_python(found.checkpoint.get("channel_values", {}))) if found else {}
    except sqlite3.Error:
        return {}
    finally:
        saver.conn.close()


def run_row(run_dir: Path) -> RunRow | None:
    try:
        config = json.loads((run_dir / "run.json").read_text())
    except (OSError, ValueError):
        return None
    state = read_state(run_dir)
    summary: dict[str, Any] = {}
    if (run_dir / "summary.json").exists():
        try:
            summary = json.loads((run_dir / "summary.json").read_text())
        except ValueError:
            summary = {}
    if not state and summary:  # runs without a loop checkpoint (external agents) report through their summary
        headline = run_headline({}, summary)
        return RunRow(
            run_id=run_dir.name,
            benchmark=str(config.get("benchmark", summary.get("task", ""))),
            base_model=str(config.get("base_model", summary.get("base_model", ""))),
            status=str(summary.get("status", "finished")),
            baseline=headline.public_baseline,
            best=headline.public_best,
            submissions=int(summary.get("submissions") or 0),
            trials=0,
            error=summary.get("error") if summary.get("status") == "failed" else None,
            headline=headline,
        )
    status = str(state.get("status") or "starting")
    if status == "running" or status == "starting":
        status = "running" if pid_alive(run_dir / "pid") else "stopped (resumable)"
    summary_path = run_dir / "summary.json"
    error = None
    if summary_path.exists() and status not in ("running",):
        try:
            summary = json.loads(summary_path.read_text())
            ended = state.get("status") in ("finished", "terminated")
            if summary.get("status") == "interrupted" and not ended:
                status = "interrupted (resumable)"
            elif summary.get("status") == "failed" and not ended:  # died on an error: failed, and why
                status, error = "failed", summary.get("error") or summary.get("stop_reason")
        except ValueError:
            pass
    return RunRow(
        run_id=run_dir.name,
        benchmark=str(config.get("benchmark", "")),
        base_model=str(config.get("base_model", "")),
        status=status,
        baseline=state.get("baseline_score"),
        best=state.get("best_score"),
        submissions=int(state.get("submissions") or 0),
        trials=len(state.get("trials") or []),
        best_trial_id=state.get("best_trial_id"),
        error=error,
        headline=run_headline(state, summary if status not in ("running",) else {}),
    )


def collect_runs(home: Path) -> list[RunRow]:
    runs_dir = home / "runs"
    if not runs_dir.is_dir():
        return []
    rows = [run_row(d) for d in sorted(runs_dir.iterdir()) if d.is_dir()]
    return [r for r in rows if r is not None]
