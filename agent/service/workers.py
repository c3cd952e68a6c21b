"""One worker process per run, at most N at once, outside the request that asked for it.

A worker is `python -m agent.launch <run_dir>/service-request.json` (a `LaunchRequest`: the run's config as the
service validated it, launched as `rlloop run`/`resume` launch theirs) in its own session (process group), so the
service stays responsive, a crashed run leaves it standing, a cancel reaches the whole group, and the worker
outlives a service restart. Each run's record (`runs/<run_id>/service.json`) lets the next service start adopt live
workers, start still-queued runs and resume runs whose worker died with the service.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import threading
import time
from pathlib import Path
from typing import IO

from agent.launch import LaunchRequest
from agent.processes import Child, signal_group, spawn_child
from agent.run import RunConfig
from agent.service.records import (
    WORKER_LOG_NAME,
    WorkerRecord,
    load_record,
    now_iso,
    record_path,
    request_path,
    save_record,
    save_request,
)
from agent.service.schemas import validate_run_request
from agent.service.settings import ServiceSettings
from agent.status import read_state
from tasks import procfs

log = logging.getLogger(__name__)

FINISHED_STATES = ("finished", "terminated")


class RunConflictError(RuntimeError):
    """The run exists, runs, or cannot be resumed or cancelled in its current state."""


class RunNotFoundError(LookupError):
    """No run of that id under the service's home."""


class WorkerPool:
    """Starts, queues, watches, cancels and recovers the service's run workers. Thread-safe."""

    def __init__(self, settings: ServiceSettings) -> None:
        self.settings = settings
        self.home = settings.home.resolve()
        self.runs_dir = self.home / "runs"
        self._lock = threading.RLock()
        self._queue: list[str] = []  # run ids, first in first out
        self._active: dict[str, WorkerRecord] = {}  # queued or running
        self._procs: dict[str, Child] = {}  # workers this process spawned (adopted ones: none)
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    # ---- lifecycle -----------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Recover what an earlier service left, then watch the workers in a background thread."""
        self.runs_dir.mkdir(parents=True, exist_ok=True)
        self.recover()
        self.tick()
        self._thread = threading.Thread(target=self._supervise, name="rlloop-workers", daemon=True)
        self._thread.start()

    def stop(self, wait_s: float = 60.0) -> None:
        """Stop watching. Workers keep running (detached) unless settings.stop_runs_on_shutdown."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)
        if not self.settings.stop_runs_on_shutdown:
            return
        with self._lock:
            running = [r for r in self._active.values() if r.state == "running"]
        for record in running:
            self._signal(record, signal.SIGTERM)
        deadline = time.monotonic() + wait_s
        while time.monotonic() < deadline and any(self._alive(r) for r in running):
            time.sleep(0.2)
        for record in running:
            if self._alive(record):
                self._signal(record, signal.SIGKILL)
        self.tick(launch=False)

    def _supervise(self) -> None:
        while not self._stop.wait(self.settings.poll_interval_s):
            try:
                self.tick()
            except Exception:  # never let one bad record kill the supervisor
                log.exception("worker supervisor tick failed")

    # ---- requests ------------------------------------------------------------------------------------------------
    def submit(self, config: RunConfig) -> WorkerRecord:
        """Queue a new run of this config (validated, its run_id set); start it if a slot is free. The worker runs
        exactly this config (its dump, `LaunchRequest`)."""
        run_id = config.run_id
        if run_id is None:
            raise ValueError("a run the service queues has its run_id set")
        run_dir = self.runs_dir / run_id
        with self._lock:
            if run_id in self._active or record_path(run_dir).exists() or (run_dir / "run.json").exists():
                raise RunConflictError(f"run {run_id!r} already exists; resume it or pick another run_id")
            run_dir.mkdir(parents=True, exist_ok=True)
            save_request(run_dir, LaunchRequest(config=config))
            record = WorkerRecord(run_id=run_id, command="run")
            self._enqueue(record)
        self.tick()
        return self.record(run_id) or record

    def resume(self, run_id: str) -> WorkerRecord:
        """Queue a resume (as `rlloop resume`) of a stopped, interrupted or crashed run."""
        run_dir = self.runs_dir / run_id
        with self._lock:
            if run_id in self._active:
                raise RunConflictError(f"run {run_id!r} is {self._active[run_id].state}; nothing to resume")
            if not run_dir.is_dir():
                raise RunNotFoundError(f"no run {run_id!r} under {self.runs_dir}")
            if not (run_dir / "run.json").exists():
                raise RunConflictError(
                    f"run {run_id!r} never started (see its worker log); create a new run instead"
                )
            status = read_state(run_dir).get("status")
            if status in FINISHED_STATES:
                raise RunConflictError(f"run {run_id!r} is {status}; there is nothing left to resume")
            if procfs.same_process_alive(*_run_pid(run_dir)):
                raise RunConflictError(
                    f"run {run_id!r} is running in another process (pid file); cancel it first"
                )
            previous = load_record(run_dir)
            record = WorkerRecord(
                run_id=run_id,
                command="resume",
                created_at=previous.created_at if previous else now_iso(),
                starts=previous.starts if previous else 0,
                auto_resumes=previous.auto_resumes if previous else 0,
            )
            self._enqueue(record)
        self.tick()
        return self.record(run_id) or record

    def cancel(self, run_id: str) -> WorkerRecord:
        """A queued run leaves the queue; a running one gets SIGTERM on its process group (it stays resumable)."""
        with self._lock:
            record = self._active.get(run_id)
            if record is None:
                if (self.runs_dir / run_id).is_dir():
                    raise RunConflictError(f"run {run_id!r} is not queued or running under this service")
                raise RunNotFoundError(f"no run {run_id!r} under {self.runs_dir}")
            if record.state == "queued":
                self._queue.remove(run_id)
                del self._active[run_id]
                record.state, record.ended_at, record.cancel_requested = "cancelled", now_iso(), True
                self._save(record)
                return record
            record.cancel_requested = True
            self._save(record)
            self._signal(record, signal.SIGTERM)
            return record

    def record(self, run_id: str) -> WorkerRecord | None:
        with self._lock:
            active = self._active.get(run_id)
            if active is not None:
                return active.model_copy()
        return load_record(self.runs_dir / run_id)

    def active_count(self) -> int:
        with self._lock:
            return sum(1 for r in self._active.values() if r.state == "running")

    # ---- supervision ---------------------------------------------------------------------------------------------
    def tick(self, launch: bool = True) -> None:
        """Reap finished workers, then start queued runs while slots are free."""
        with self._lock:
            for run_id, record in list(self._active.items()):
                if record.state != "running":
                    continue
                proc = self._procs.get(run_id)
                if proc is not None:
                    code = proc.poll()
                    if code is None:
                        continue
                elif self._alive(record):
                    continue
                else:
                    code = None  # an adopted worker: not our child, its exit code is unknown
                self._procs.pop(run_id, None)
                del self._active[run_id]
                record.state, record.exit_code, record.ended_at = "exited", code, now_iso()
                self._save(record)
            while launch and self._queue and self.active_count() < self.settings.max_concurrent_runs:
                self._launch(self._active[self._queue.pop(0)])

    def recover(self) -> None:
        """Adopt live workers, re-queue queued runs, resume runs whose worker died while marked running."""
        records = [r for r in (load_record(d) for d in sorted(self.runs_dir.iterdir()) if d.is_dir()) if r]
        with self._lock:
            for record in sorted(records, key=lambda r: r.queued_at):
                run_dir = self.runs_dir / record.run_id
                if record.state == "queued":
                    self._enqueue(record)
                elif record.state == "running" and self._alive(record):
                    self._active[record.run_id] = record  # adopted: watched by pid, not as our child
                    log.info("adopted the live worker %s of run %s", record.pid, record.run_id)
                elif record.state == "running":
                    self._recover_dead(record, run_dir)

    def _recover_dead(self, record: WorkerRecord, run_dir: Path) -> None:
        record.state, record.ended_at = "exited", now_iso()
        status = read_state(run_dir).get("status")
        if status in FINISHED_STATES or record.cancel_requested:
            self._save(record)
            return
        if record.auto_resumes >= self.settings.max_auto_resumes:
            _append_log(
                run_dir, f"[service] worker died; not resumed again after {record.auto_resumes} recoveries"
            )
            self._save(record)
            return
        started = (run_dir / "run.json").exists()
        _append_log(
            run_dir,
            f"[service] worker {record.pid} died with the service; {'resuming' if started else 'restarting'} the run",
        )
        record = record.model_copy(
            update={
                "state": "queued",
                "command": "resume" if started else record.command,
                "pid": None,
                "process_start": None,
                "exit_code": None,
                "ended_at": None,
                "queued_at": now_iso(),
                "auto_resumes": record.auto_resumes + 1,
            }
        )
        self._enqueue(record)

    # ---- internals -----------------------------------------------------------------------------------------------
    def _enqueue(self, record: WorkerRecord) -> None:
        record.state = "queued"
        self._active[record.run_id] = record
        self._queue.append(record.run_id)
        self._save(record)

    def _launch(self, record: WorkerRecord) -> None:
        run_dir = self.runs_dir / record.run_id
        handle: IO[bytes] | None = None
        try:
            command = self._command(record, run_dir)
            handle = (run_dir / WORKER_LOG_NAME).open("ab")
            starting = (
                f"[service] {now_iso()} starting ({record.command} {record.run_id}): {' '.join(command)}"
            )
            handle.write(f"{starting}\n".encode())
            handle.flush()
            # its own session: a cancel reaches all of it, a Ctrl-C here does not; no death signal and no keeper, as
            # it outlives the service on purpose (the next service adopts it)
            child = spawn_child(
                command,
                death_signal=None,
                keeper=False,
                stdin=subprocess.DEVNULL,
                stdout=handle,
                stderr=subprocess.STDOUT,
                # COLUMNS: rich would wrap the run's one-line messages at 80 columns in the log
                env={**os.environ, "RLLOOP_HOME": str(self.home), "PYTHONUNBUFFERED": "1", "COLUMNS": "400"},
            )
        except (OSError, ValueError) as exc:
            _append_log(run_dir, f"error: could not start the worker: {exc}")
            del self._active[record.run_id]
            record.state, record.exit_code, record.ended_at = "exited", -1, now_iso()
            self._save(record)
            return
        finally:
            if handle is not None:
                handle.close()
        self._procs[record.run_id] = child
        record.state, record.pid, record.process_start = "running", child.pid, procfs.start_time(child.pid)
        record.started_at, record.ended_at, record.exit_code = now_iso(), None, None
        record.starts += 1
        self._save(record)

    def _command(self, record: WorkerRecord, run_dir: Path) -> list[str]:
        """`python -m agent.launch <run_dir>/service-request.json`: a new run's request was written when it was
        queued; a resume writes its own (the run goes on with what it started with, its run.json)."""
        if record.command == "resume":
            # nothing requested: start_run takes the run's own run.json
            resumed = LaunchRequest(config=validate_run_request({}, self.home), resume_run_id=record.run_id)
            save_request(run_dir, resumed)
        return [self.settings.python, "-m", "agent.launch", str(request_path(run_dir))]

    def _alive(self, record: WorkerRecord) -> bool:
        proc = self._procs.get(record.run_id)
        if proc is not None:
            return proc.poll() is None
        return procfs.same_process_alive(record.pid, record.process_start)

    def _signal(self, record: WorkerRecord, sig: signal.Signals) -> None:
        if record.pid is None or not self._alive(record):
            return
        signal_group(record.pid, sig)  # the worker leads its own session's group, adopted or ours

    def _save(self, record: WorkerRecord) -> None:
        save_record(self.runs_dir / record.run_id, record)


def _run_pid(run_dir: Path) -> tuple[int | None, str | None]:
    """The pid in the run's own pid file, with its current start time (any live process with that pid)."""
    try:
        pid = int((run_dir / "pid").read_text().strip())
    except (OSError, ValueError):
        return None, None
    return pid, procfs.start_time(pid)


def _append_log(run_dir: Path, line: str) -> None:
    with (run_dir / WORKER_LOG_NAME).open("a") as handle:
        handle.write(line.rstrip("\n") + "\n")


def last_error(run_dir: Path, limit: int = 500) -> str | None:
    """The worker log's last `error:` line, or its last line: the one-line reason a run failed."""
    try:
        with (run_dir / WORKER_LOG_NAME).open("rb") as handle:
            handle.seek(0, os.SEEK_END)
            handle.seek(max(0, handle.tell() - 16384))
            tail = handle.read().decode(errors="replace")
    except OSError:
        return None
    lines = [line.strip() for line in tail.splitlines() if line.strip() and not line.startswith("[service]")]
    if not lines:
        return None
    errors = [line for line in lines if line.lower().startswith("error:") or "Error:" in line]
    return (errors[-1] if errors else lines[-1])[:limit]
