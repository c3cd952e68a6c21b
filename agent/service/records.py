"""What the service remembers about each run it started: `runs/<run_id>/service.json`, written atomically.

The record survives the service: on the next start it says which runs were this service's, which worker process
(pid + start time, `tasks.procfs.same_process_alive`, so a reused pid is never mistaken for ours) ran each, and which were still queued.
"""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.launch import LaunchRequest
from tasks.atomic import atomic_write_json

RECORD_NAME = "service.json"
REQUEST_NAME = "service-request.json"  # what the run's worker launches (`python -m agent.launch FILE`)
WORKER_LOG_NAME = "worker.log"

WorkerState = Literal["queued", "running", "exited", "cancelled"]
WorkerCommand = Literal["run", "resume"]


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


class WorkerRecord(BaseModel):
    """One run as the service tracks it: its worker's lifecycle, not the research state (that is the checkpoint)."""

    run_id: str
    state: WorkerState = "queued"
    command: WorkerCommand = "run"
    pid: int | None = None
    process_start: str | None = Field(
        default=None, description="The worker's start time in clock ticks (/proc), or None."
    )
    created_at: str = Field(default_factory=now_iso)
    queued_at: str = Field(default_factory=now_iso)
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None
    cancel_requested: bool = False
    starts: int = 0
    auto_resumes: int = 0


def record_path(run_dir: Path) -> Path:
    return run_dir / RECORD_NAME


def save_record(run_dir: Path, record: WorkerRecord) -> None:
    atomic_write_json(record_path(run_dir), record.model_dump(mode="json"))


def load_record(run_dir: Path) -> WorkerRecord | None:
    """The run's service record, or None when the service never started it (or the file is unreadable)."""
    try:
        return WorkerRecord.model_validate_json(record_path(run_dir).read_text())
    except (OSError, ValueError):
        return None


def request_path(run_dir: Path) -> Path:
    return run_dir / REQUEST_NAME


def save_request(run_dir: Path, request: LaunchRequest) -> None:
    atomic_write_json(request_path(run_dir), request.model_dump(mode="json"))
