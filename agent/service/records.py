"""What the service remembers about each run it started: `runs/<run_id>/service.json`, written atomically.

The record survives the service: on the next start it says which runs were this service's, which worker process
(pid + start time, so a reused pid is never mistaken for ours) ran each, and which were still queued.
"""

from __future__ import annotations

import os
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field

from agent.workspace import atomic_write_json

RECORD_NAME = "service.json"
REQUEST_NAME = "service-request.json"
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


def process_start_time(pid: int) -> str | None:
    """Field 22 of /proc/<pid>/stat: identifies a process together with its pid. None when it is gone."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its closing parenthesis
    fields = stat[stat.rfind(")") + 2 :].split()
    return fields[19] if len(fields) > 19 else None


def same_process_alive(pid: int | None, start: str | None) -> bool:
    """True when `pid` still runs and is the very process recorded (not a later one that reused the pid)."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    current = process_start_time(pid)
    if current is None:  # no /proc here: trust the signal probe
        return not Path("/proc/self/stat").exists()
    if _is_zombie(pid):
        return False
    return start is None or current == start


def _is_zombie(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return False
    fields = stat[stat.rfind(")") + 2 :].split()
    return bool(fields) and fields[0] in ("Z", "X")
