"""What every sandbox backend does the same way around the command it started, decided once here.

A run is checked (`check_request`), holds the lease on each of its GPUs for as long as it runs (`run_leased`: never
two users of one device, see devices.py), gets the same per-process limits (`rlimits`), and is watched by one
`Supervisor`: the wall-clock deadline, the workspace's growth past `max_output_mb`, an interruption from outside
(the reaper), the notes in the log that say which of them stopped it, and the `SandboxResult` that reports it.

A backend keeps only what differs: how it starts the command, how it waits for it and kills it, what it mounts
(see backends/local.py and backends/docker.py).
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, get_args

from sandbox.base import Network, SandboxRequest, SandboxResult
from sandbox.devices import gpu_lease
from sandbox.logstream import CappedLog
from sandbox.output_watch import OutputWatch

WAIT_SLICE_S = 0.5  # longest single wait for the command's exit, so an interruption is seen this quickly
CPU_GRACE_S = 5  # RLIMIT_CPU: SIGXCPU at cpu_time_s, SIGKILL this much later
MB = 1024 * 1024


def check_request(request: SandboxRequest) -> None:
    """One clear ValueError for a request no backend can run (each backend adds what only it refuses)."""
    if not request.command:
        raise ValueError("sandbox request has an empty command: pass the program and its arguments as a list")
    if not request.workspace.is_dir():
        raise ValueError(f"workspace {request.workspace} is not a folder: create it before running a trial")
    if request.network not in get_args(Network):  # a model_copy or model_construct skips validation
        raise ValueError(f"unknown network {request.network!r}: use 'none' or 'grader'")
    writable = Path(os.path.abspath(request.workspace))
    log = Path(os.path.abspath(request.log_path))
    if log == writable or writable in log.parents:
        raise ValueError(
            f"log_path {request.log_path} lies in the workspace the command may write: the host never writes or "
            "reads back a file there (a trial could replace it with a link); put the log beside the workspace"
        )
    for mount in request.mounts:
        if not mount.read_only:
            raise ValueError(
                f"mount {mount.source} is writable: a command writes only its workspace; mount it read-only"
            )
    for path in (request.workspace_target, request.workdir, *(m.target for m in request.mounts)):
        if path is not None and not path.is_absolute():
            raise ValueError(f"{path} must be an absolute path as the command sees it (e.g. /workspace)")


def run_leased(request: SandboxRequest, run: Callable[[SandboxRequest], SandboxResult]) -> SandboxResult:
    """Check `request`, then `run` it while holding every GPU it names (waiting while another process holds one)."""
    check_request(request)
    with gpu_lease(request.gpus, holder=request.describe()):
        return run(request)


def rlimits(request: SandboxRequest) -> dict[str, tuple[int, int]]:
    """(soft, hard) per-process limits every backend sets alike, by their `ulimit` names: "cpu" (CPU-seconds) and
    "fsize" (the size of any one file, at max_output_mb; the workspace's total is the Supervisor's watch)."""
    limits: dict[str, tuple[int, int]] = {}
    if request.cpu_time_s is not None:
        limits["cpu"] = (request.cpu_time_s, request.cpu_time_s + CPU_GRACE_S)
    if request.max_output_mb is not None:
        limits["fsize"] = (request.max_output_mb * MB, request.max_output_mb * MB)
    return limits


def labels_match(run_labels: dict[str, str], wanted: dict[str, str] | None) -> bool:
    """Whether a run carrying `run_labels` is one `cleanup(wanted)` stops (all of them when `wanted` is None)."""
    return wanted is None or all(run_labels.get(k) == v for k, v in wanted.items())


class Supervisor:
    """One run's clock and verdict. Made when the backend is about to start the command: the wall-clock limit
    counts from then. The backend waits through `watch`, stops what is still running, and reports with `result`."""

    def __init__(self, request: SandboxRequest, log: CappedLog, poll_s: float) -> None:
        self.request = request
        self.log = log
        self.poll_s = poll_s  # how often the workspace's size is measured (a walk of the whole tree)
        self.started = time.monotonic()
        self.interrupted = threading.Event()
        self.timed_out = False
        self.output_exceeded = False
        self.oom_killed = False

    @property
    def stopped_by_us(self) -> bool:
        """The command did not end by itself, so its exit code says nothing."""
        return self.timed_out or self.output_exceeded or self.interrupted.is_set()

    def stopper(self, kill: Callable[[], object]) -> Callable[[], None]:
        """The callback to register with the reaper: marks the run interrupted, then `kill`s it."""

        def stop() -> None:
            self.interrupted.set()
            kill()

        return stop

    def watch(self, exited: Callable[[float], bool], stopping: str) -> None:
        """Return once the command has exited, was interrupted, reached the deadline, or grew the workspace past
        `max_output_mb`; the caller then stops whatever still runs. `exited(t)` waits up to t seconds (0: only
        looks) and says whether the command is done; `stopping` is what the caller stops, for the log."""
        request = self.request
        growth = OutputWatch(request.workspace, request.max_output_mb)
        deadline = self.started + request.timeout_s
        next_watch = self.started + self.poll_s
        done = exited(0)
        while not done and not self.interrupted.is_set():
            now = time.monotonic()
            if now >= deadline:
                self.timed_out = True
                break
            if now >= next_watch:
                next_watch = now + self.poll_s
                if growth.exceeded():
                    self.output_exceeded = True
                    break
            done = exited(min(WAIT_SLICE_S, deadline - now, max(0.01, next_watch - now)))
        if self.timed_out:
            self.log.note(f"wall-clock limit of {request.timeout_s:g}s reached: stopping {stopping}")
        if self.output_exceeded:
            self.log.note(
                f"the workspace grew by {growth.peak_growth // MB} MB, past max_output_mb="
                f"{request.max_output_mb}: stopping {stopping}"
            )

    def finish(self, oom_killed: bool) -> None:
        """The run is over: note an out-of-memory kill and close the log."""
        self.oom_killed = oom_killed
        if oom_killed:
            self.log.note(f"out of memory: the run went over memory_mb={self.request.memory_mb}")
        self.log.close()

    def result(self, exit_code: int | None, backend: str, **extra: Any) -> SandboxResult:
        """How the run ended; `exit_code` counts only when the command ended by itself."""
        return SandboxResult(
            exit_code=None if self.stopped_by_us else exit_code,
            log_path=self.request.log_path,
            duration_s=time.monotonic() - self.started,
            timed_out=self.timed_out,
            oom_killed=self.oom_killed,
            interrupted=self.interrupted.is_set(),
            output_limit_exceeded=self.output_exceeded,
            log_tail=self.log.tail(),
            backend=backend,
            **extra,
        )
