"""Run each trial as a Ray task on whichever node has room, inside that node's Docker (or local) sandbox.

The task asks Ray for the request's resources (num_cpus = request.cpus or 1, num_gpus = len(request.gpus), memory =
request.memory_mb), so two trials, or a trial and anything else scheduled through Ray, never share a GPU by
accident: the task hands the trial the GPU ids Ray assigned, not the ones requested. The trial's log is written to
`request.log_path`, which (like the workspace the checkpoint lands in) must be on storage the nodes share.

A worker that dies mid-trial (killed, OOM-killed by Ray, node lost) ends as a failed trial with `worker_lost=True`,
or is retried when `max_retries` > 0. Nothing outlives it: the task starts a watchdog process
(`python -m sandbox.backends.ray --watch PID MARKER`) that, once the worker is gone, kills every process carrying
the trial's marker variable and removes its containers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
import uuid
from typing import Any

from sandbox import namespaces, supervise
from sandbox.base import SandboxRequest, SandboxResult
from sandbox.registry import SANDBOXES, resolve_auto
from tasks import procfs

MARKER_ENV = "RLLOOP_RAY_TRIAL"
MARKER_LABEL = "rlloop.ray_trial"


class RaySandboxResult(SandboxResult):
    """A SandboxResult that can also say the Ray worker running the trial was lost."""

    worker_lost: bool = False

    def reason(self) -> str:
        if self.worker_lost:
            return "the Ray worker running the trial died (killed, out of memory or node lost)"
        return super().reason()


class RaySandbox:
    """Trials as Ray tasks (see the module docstring)."""

    name = "ray"

    def __init__(
        self,
        address: str | None = None,
        inner: str = "auto",
        max_retries: int = 0,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if inner not in ("auto", "docker", "local"):
            raise ValueError(f"unknown inner sandbox {inner!r}: use auto, docker or local")
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.inner = inner if inner != "auto" else resolve_auto().name
        # as the driver's machine can do it; a Ray node runs its trials in its own local or docker sandbox
        self.isolation = "container" if self.inner == "docker" else namespaces.probe().level
        self.max_retries = max_retries
        self.init_kwargs = init_kwargs or {}
        self._live: dict[str, tuple[dict[str, str], Any]] = {}
        self._lock = threading.Lock()

    @property
    def maps_paths(self) -> bool:
        """Whether trials see their folders at fixed targets: as the inner sandbox on the node does."""
        return self.inner == "docker" or self.isolation == "namespaces"

    @property
    def python(self) -> str:
        """The interpreter trials run with (see agent.loop.trials.python_for)."""
        return sys.executable if self.inner == "local" else "python"

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False, **self.init_kwargs)
        return ray

    def run(self, request: SandboxRequest) -> SandboxResult:
        ray = self._ray()
        marker = uuid.uuid4().hex
        request = request.model_copy(
            update={
                "env": {**request.env, MARKER_ENV: marker},
                "labels": {**request.labels, MARKER_LABEL: marker},
            }
        )
        options: dict[str, Any] = {
            "num_cpus": request.cpus or 1.0,
            "num_gpus": len(request.gpus),
            "max_retries": self.max_retries,
            "retry_exceptions": False,
        }
        if request.memory_mb:
            options["memory"] = request.memory_mb * supervise.MB
        started = time.monotonic()
        ref = ray.remote(_trial_task).options(**options).remote(request.model_dump_json(), self.inner)
        with self._lock:
            self._live[marker] = (request.labels, ref)
        try:
            data = ray.get(ref)
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            raise
        except ray.exceptions.RayError as exc:
            return _lost(request, exc, time.monotonic() - started)
        finally:
            with self._lock:
                self._live.pop(marker, None)
        return RaySandboxResult.model_validate(data)

    def cleanup(self, labels: dict[str, str] | None = None) -> int:
        """Cancel (force: the worker is killed, its watchdog kills the trial) the live trials carrying `labels`."""
        with self._lock:
            live = list(self._live.values())
        stopped = 0
        for run_labels, ref in live:
            if supervise.labels_match(run_labels, labels):
                with contextlib.suppress(Exception):
                    import ray

                    ray.cancel(ref, force=True)
                    stopped += 1
        return stopped


def _lost(request: SandboxRequest, exc: Exception, duration_s: float) -> RaySandboxResult:
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    note = f"\n[rlloop] the Ray worker running this trial died: {type(exc).__name__}: {first}\n"
    tail = ""
    with contextlib.suppress(OSError):
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(request.log_path, "ab") as handle:
            handle.write(note.encode())
        with open(request.log_path, "rb") as handle:  # the host's own log (never in the trial's folder)
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4000))
            tail = handle.read().decode(errors="replace")
    return RaySandboxResult(
        exit_code=None,
        log_path=request.log_path,
        duration_s=duration_s,
        log_tail=tail or note,
        backend="ray",
        worker_lost=True,
    )


def _trial_task(request_json: str, inner: str) -> dict[str, Any]:
    """The Ray task: run the trial in this node's inner sandbox, guarded by a watchdog."""
    import ray

    request = SandboxRequest.model_validate_json(request_json)
    if request.gpus:  # the devices Ray gave this task, never the ones asked for by index
        request.gpus = [int(g) for g in ray.get_gpu_ids()]
    marker = request.env[MARKER_ENV]
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "sandbox.backends.ray", "--watch", str(os.getpid()), marker],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # the backend's own defaults (local: namespaces wherever this node can), as a trial on this node would get
        result = SANDBOXES.get(inner)().run(request)
    finally:
        watchdog.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=5)
    data = result.model_dump(mode="json")
    data["backend"] = f"ray/{result.backend}"
    return data


def _marked_pids(marker: str) -> set[int]:
    return {pid for pid, value in procfs.with_env(MARKER_ENV).items() if value == marker} - {os.getpid()}


def watch(worker_pid: int, marker: str, poll_s: float = 0.5) -> int:
    """Wait for the worker to die, then kill what its trial left. Exits quietly on SIGTERM (trial ended)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while procfs.alive(worker_pid):
        time.sleep(poll_s)
    killed = 0
    for _ in range(3):  # a second pass catches children forked while the first was killing
        pids = _marked_pids(marker)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        if not pids:
            break
        time.sleep(0.2)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={MARKER_LABEL}={marker}"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=60)
    return killed


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--watch":
        watch(int(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    sys.exit("usage: python -m sandbox.backends.ray --watch WORKER_PID MARKER")
