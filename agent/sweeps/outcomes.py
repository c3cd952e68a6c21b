"""Where sweeps keep their files (RLLOOP_HOME/sweeps) and the outcome each run's worker leaves there: what the
executors need of a run, without the sweep's spec (`agent.sweeps.worker.WorkerPayload` adds it)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel


def sweeps_dir(home: Path) -> Path:
    return home / "sweeps"


class RunAddress(BaseModel):
    """Which run of which sweep, under which home."""

    home: Path
    sweep_id: str
    run_id: str


class Outcome(BaseModel):
    run_id: str
    status: Literal["finished", "failed", "interrupted"]
    action: Literal["skipped", "started", "resumed"]
    summary: dict[str, Any] = {}
    error: str | None = None


def outcome_path(home: Path, sweep_id: str, run_id: str) -> Path:
    return sweeps_dir(home) / sweep_id / "outcomes" / f"{run_id}.json"
