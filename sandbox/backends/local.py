"""Run a trial as a local process: own session, scrubbed environment, limits, and nothing left behind.

NOT a security boundary. The command runs as this user, sees the host filesystem and network, and can read any
file this user can. Use it for trusted recipes and for development; run untrusted code with the docker backend.

What it does guarantee: the command starts in its own session (process group) with only PATH, HOME=workspace,
LANG, PYTHONUNBUFFERED=1 and `request.env` in its environment (no API keys from the parent); cwd is the workspace;
memory, process count and CPU share are capped by a cgroup where one can be made (else RLIMIT_AS for memory);
RLIMIT_CPU caps CPU-seconds, RLIMIT_FSIZE the size of any one file, and the growth of the workspace is watched for
`max_output_mb`; the log is streamed with a byte cap; at the wall-clock limit every process of the run, including
double-forked ones that left the group, gets SIGTERM, a grace period, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import resource
import signal
import subprocess
import threading
import time
from pathlib import Path

from sandbox import reaper
from sandbox.base import SandboxRequest, SandboxResult
from sandbox.devices import gpu_lease
from sandbox.jail import Jail
from sandbox.logstream import CappedLog, pump
from sandbox.output_watch import OutputWatch

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


def scrubbed_env(request: SandboxRequest, marker: tuple[str, str] | None = None) -> dict[str, str]:
    """The whole environment of the command: a minimal base, then `request.env` on top."""
    env = {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        "HOME": str(request.workspace),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in request.gpus),
    }
    if request.grader_url:
        env["RLLOOP_GRADER_URL"] = request.grader_url
    env.update(request.env)
    if marker is not None:
        env[marker[0]] = marker[1]
    return env


def _set_limits(request: SandboxRequest, memory_by_rlimit: bool) -> None:
    """rlimits for the child (runs between fork and exec)."""
    if request.cpu_time_s is not None:
        resource.setrlimit(resource.RLIMIT_CPU, (request.cpu_time_s, request.cpu_time_s + 5))
    if request.max_output_mb is not None:
        size = request.max_output_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_FSIZE, (size, size))
    if memory_by_rlimit and request.memory_mb is not None:
        size = request.memory_mb * 1024 * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    # RLIMIT_NPROC counts every process of the user and root ignores it: only meaningful for other users.
    if request.max_processes is not None and os.geteuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (request.max_processes, request.max_processes))


class LocalSandbox:
    """Runs each command as a local process tree (see the module docstring for what it does and does not stop)."""

    name = "local"

    def __init__(
        self, grace_s: float = 5.0, use_cgroup: bool | None = None, output_poll_s: float = 2.0
    ) -> None:
        self.grace_s = grace_s
        self.use_cgroup = use_cgroup  # None: use a cgroup when one can be made here
        self.output_poll_s = output_poll_s
        self._runs: dict[str, tuple[dict[str, str], Jail]] = {}
        self._lock = threading.Lock()

    def run(self, request: SandboxRequest) -> SandboxResult:
        _check(request)
        with gpu_lease(
            request.gpus, holder=request.describe()
        ):  # never two users of one GPU (see devices.py)
            return self._run(request)

    def _run(self, request: SandboxRequest) -> SandboxResult:
        jail = Jail(self.use_cgroup, request.memory_mb, request.max_processes, request.cpus)
        memory_by_rlimit = not jail.uses_cgroup and not request.gpus  # RLIMIT_AS breaks CUDA's address space
        log = CappedLog(request.log_path, request.max_log_bytes)
        interrupted = threading.Event()
        started = time.monotonic()

        def child_setup() -> None:
            jail.enter()
            _set_limits(request, memory_by_rlimit)

        try:
            proc = subprocess.Popen(
                request.command,
                cwd=request.workspace,
                env=scrubbed_env(request, jail.marker),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_setup,
                close_fds=True,
            )
        except OSError as exc:
            log.note(f"could not start {request.command[0]!r}: {exc}")
            log.close()
            jail.close()
            return SandboxResult(
                exit_code=127,
                log_path=request.log_path,
                duration_s=time.monotonic() - started,
                log_tail=log.tail(),
                backend=self.name,
            )
        jail.leader = proc.pid

        def stop_from_outside() -> None:
            interrupted.set()
            jail.signal(signal.SIGKILL)

        with self._lock:
            self._runs[jail.id] = (request.labels, jail)
        reaper.register(jail.id, stop_from_outside)
        assert proc.stdout is not None
        reader = threading.Thread(target=pump, args=(proc.stdout, log), daemon=True)
        reader.start()
        watch = OutputWatch(request.workspace, request.max_output_mb)
        timed_out = output_exceeded = False
        deadline = started + request.timeout_s
        next_watch = started + self.output_poll_s
        try:
            while proc.poll() is None and not interrupted.is_set():
                now = time.monotonic()
                if now >= deadline:
                    timed_out = True
                    break
                if now >= next_watch:
                    next_watch = now + self.output_poll_s
                    if watch.exceeded():
                        output_exceeded = True
                        break
                with contextlib.suppress(subprocess.TimeoutExpired):
                    proc.wait(timeout=min(0.5, deadline - now, max(0.01, next_watch - now)))
            if timed_out:
                log.note(
                    f"wall-clock limit of {request.timeout_s:g}s reached: stopping every process of the run"
                )
            if output_exceeded:
                log.note(
                    f"the workspace grew by {watch.peak_growth // 2**20} MB, past max_output_mb="
                    f"{request.max_output_mb}: stopping the run"
                )
            if proc.poll() is None:
                jail.terminate(0.0 if interrupted.is_set() else self.grace_s)
            else:
                jail.kill()  # the leader is done: whatever it left running in the background goes too
            proc.wait()
        except BaseException:  # KeyboardInterrupt, SystemExit: nothing may outlive the caller
            jail.kill()
            proc.wait()
            raise
        finally:
            reader.join(timeout=10)
            reaper.unregister(jail.id)
            with self._lock:
                self._runs.pop(jail.id, None)
            oom = jail.oom_kills() > 0
            jail.close()
            if oom:
                log.note(f"out of memory: the run was over memory_mb={request.memory_mb}")
            if proc.returncode == -signal.SIGXCPU:
                log.note(f"CPU-time limit of {request.cpu_time_s}s (cpu_time_s) reached")
            log.close()
        killed_by_us = timed_out or output_exceeded or interrupted.is_set()
        rc = proc.returncode
        if rc is not None and rc < 0:
            rc = 128 - rc  # killed by a signal, as a shell reports it
        return SandboxResult(
            exit_code=None if killed_by_us else rc,
            log_path=request.log_path,
            duration_s=time.monotonic() - started,
            timed_out=timed_out,
            oom_killed=oom,
            interrupted=interrupted.is_set(),
            output_limit_exceeded=output_exceeded,
            log_tail=log.tail(),
            backend=self.name,
        )

    def cleanup(self, labels: dict[str, str] | None = None) -> int:
        """Stop the live runs of this sandbox whose labels include `labels` (all of them when None)."""
        with self._lock:
            runs = list(self._runs.values())
        stopped = 0
        for run_labels, jail in runs:
            if labels is None or all(run_labels.get(k) == v for k, v in labels.items()):
                jail.signal(signal.SIGKILL)
                stopped += 1
        return stopped


def _check(request: SandboxRequest) -> None:
    if not request.command:
        raise ValueError("sandbox request has an empty command: pass the program and its arguments as a list")
    if not request.workspace.is_dir():
        raise ValueError(f"workspace {request.workspace} is not a folder: create it before running a trial")
    for mount in request.mounts:
        if mount.target is not None and Path(mount.target) != Path(mount.source):
            raise ValueError(
                f"local sandbox cannot remap {mount.source} to {mount.target}: use the same path or the docker backend"
            )
    if request.network not in ("none", "grader"):
        raise ValueError(f"unknown network {request.network!r}: use 'none' or 'grader'")
