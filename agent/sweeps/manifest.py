"""The sweep manifest: RLLOOP_HOME/sweeps/<sweep_id>.json, one entry per run, written atomically by the driver."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.results import summary_figures
from agent.sweeps.outcomes import sweeps_dir
from agent.sweeps.spec import Combination, SweepSpec
from tasks.atomic import atomic_write_json

EntryStatus = Literal["pending", "running", "finished", "failed", "interrupted"]
DONE: tuple[str, ...] = ("finished",)


class Entry(BaseModel):
    """One run of the sweep as the driver last saw it."""

    run_id: str
    combination: Combination
    status: EntryStatus = "pending"
    attempts: int = 0
    started_at: float | None = None
    finished_at: float | None = None
    baseline: float | None = None
    best: float | None = None
    submissions: int = 0
    error: str | None = None
    agent_error: str | None = None  # an external agent that failed: its error line (the run itself finished)
    mlflow_parent: str | None = None


class Manifest(BaseModel):
    sweep_id: str
    spec: SweepSpec
    created_at: float = Field(default_factory=time.time)
    updated_at: float = Field(default_factory=time.time)
    status: Literal["running", "finished", "interrupted"] = "running"
    mlflow_run_id: str | None = None
    entries: dict[str, Entry] = Field(default_factory=dict)

    def pending(self) -> list[Entry]:
        """Runs still to do: never started, interrupted, or failed (a failed run is retried by resuming it)."""
        return [e for e in self.entries.values() if e.status not in DONE]


def manifest_path(home: Path, sweep_id: str) -> Path:
    return sweeps_dir(home) / f"{sweep_id}.json"


def save(home: Path, manifest: Manifest) -> None:
    manifest.updated_at = time.time()
    atomic_write_json(manifest_path(home, manifest.sweep_id), manifest.model_dump(mode="json"))


def load(home: Path, sweep_id: str) -> Manifest | None:
    path = manifest_path(home, sweep_id)
    if not path.exists():
        return None
    try:
        return Manifest.model_validate(json.loads(path.read_text()))
    except ValueError as exc:
        raise ValueError(
            f"sweep manifest {path} is unreadable ({exc}); move it away to start the sweep anew"
        ) from None


def open_manifest(home: Path, spec: SweepSpec) -> Manifest:
    """The sweep's manifest: the saved one (same sweep id: resume), with entries for any new combination."""
    manifest = load(home, spec.sweep_id) or Manifest(sweep_id=spec.sweep_id, spec=spec)
    manifest.spec = spec
    for combination in spec.combinations():
        run_id = combination.run_id(spec.sweep_id)
        entry = manifest.entries.get(run_id)
        if entry is None:
            manifest.entries[run_id] = Entry(run_id=run_id, combination=combination)
        elif entry.status == "running":  # the driver died while it ran: resume it
            entry.status = "interrupted"
    manifest.status = "running"
    return manifest


def latest_sweep_id(home: Path) -> str | None:
    paths = sorted(sweeps_dir(home).glob("*.json"), key=lambda p: p.stat().st_mtime)
    return paths[-1].stem if paths else None


def entry_from_summary(entry: Entry, summary: dict[str, Any]) -> None:
    """Fold a run's summary (runner or external agent) into its manifest entry."""
    figures = summary_figures(summary)  # as results.csv and the sweep report give them
    entry.baseline, entry.best = figures["baseline"], figures["best_score"]
    entry.submissions = figures["submissions"]
    entry.agent_error = summary.get("agent_error") or None
