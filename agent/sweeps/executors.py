"""Where sweep runs execute: worker processes on this machine (`--concurrency` at once) or Ray tasks (`--ray`).

Both start the same worker process (`python -m agent.sweeps.worker`), so a run behaves the same wherever it runs.
The worker gets SIGTERM when whatever started it dies (PR_SET_PDEATHSIG): the run then stops its trial, keeps what
it wrote and is resumed by the next attempt. Ray retries a task whose worker died (`max_retries`); the retry resumes
the run. RLLOOP_HOME must be on storage every Ray node shares: the driver checks that each node sees the sweep's
folder before the first run starts.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any, Protocol

from agent.processes import Child, spawn_child
from agent.sweeps.outcomes import Outcome, RunAddress, outcome_path
from sandbox import untrusted
from tasks import procfs
from tasks.plugins import Registry

STOP_GRACE_S = 60.0  # a worker's time to finalize its run after SIGTERM, before its tree is killed


def launch_worker(payload_json: str, live: dict[int, Child] | None = None) -> dict[str, Any]:
    """Run one sweep run in a worker process and return its `Outcome` as a dict."""
    payload = RunAddress.model_validate_json(payload_json)
    target = outcome_path(payload.home, payload.sweep_id, payload.run_id)
    target.unlink(missing_ok=True)
    log_path = target.parent.parent / "logs" / f"{payload.run_id}.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with open(log_path, "ab") as log:
        # no keeper: on our death the worker gets SIGTERM alone and finalizes its run as interrupted
        child = spawn_child(
            [sys.executable, "-m", "agent.sweeps.worker", payload_json],
            death_signal=signal.SIGTERM,
            keeper=False,
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
        )
    if live is not None:
        live[child.pid] = child
    try:
        code = child.proc.wait()
    except BaseException:
        child.interrupt(STOP_GRACE_S)
        raise
    finally:
        if live is not None:
            live.pop(child.pid, None)
    try:
        # the worker's file, read back like any other: no link followed, no FIFO opened, a size cap
        text = untrusted.read_text(target.parent, target.name, max_bytes=16 * 1024**2)
        return Outcome.model_validate_json(text).model_dump(mode="json")
    except (OSError, ValueError):
        return Outcome(
            run_id=payload.run_id,
            status="interrupted" if code in (130, -signal.SIGTERM, -signal.SIGKILL) else "failed",
            action="started",
            error=f"worker exited with code {code} before writing its outcome; see {log_path}",
        ).model_dump(mode="json")


class Executor(Protocol):
    name: str

    def submit(self, payload: RunAddress) -> Future[dict[str, Any]]: ...

    def interrupt(self) -> None: ...

    def close(self) -> None: ...


class LocalExecutor:
    """Worker processes on this machine, `concurrency` at once."""

    name = "local"

    def __init__(self, concurrency: int) -> None:
        self._pool = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="rlloop-sweep")
        self._live: dict[int, Child] = {}

    def submit(self, payload: RunAddress) -> Future[dict[str, Any]]:
        return self._pool.submit(launch_worker, payload.model_dump_json(), self._live)

    def interrupt(self) -> None:
        """Each worker gets SIGTERM (its run finalizes as interrupted), then SIGKILL after STOP_GRACE_S."""
        stoppers = [
            threading.Thread(target=child.interrupt, args=(STOP_GRACE_S,))
            for child in list(self._live.values())
        ]
        for thread in stoppers:
            thread.start()
        for thread in stoppers:
            thread.join()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


class RayExecutor:
    """Each run is a Ray task (`num_cpus` each) on whichever node has room; a task whose worker died is retried."""

    name = "ray"

    def __init__(self, address: str | None, num_cpus: float = 1.0, max_retries: int = 1) -> None:
        import ray

        if not ray.is_initialized():
            target = address or os.environ.get("RAY_ADDRESS") or "auto"
            ray.init(address=target, log_to_driver=False)  # "local": a new instance of its own
        self._ray = ray
        self._remote = ray.remote(_ray_run).options(
            num_cpus=num_cpus, max_retries=max_retries, retry_exceptions=False
        )
        self._refs: list[Any] = []

    def submit(self, payload: RunAddress) -> Future[dict[str, Any]]:
        ref = self._remote.remote(payload.model_dump_json())
        self._refs.append(ref)
        future: Future[dict[str, Any]] = Future()

        def settle() -> None:
            try:
                future.set_result(self._ray.get(ref))
            except Exception as exc:  # the task failed for good (retries spent, node lost, cancelled)
                future.set_result(
                    Outcome(
                        run_id=payload.run_id,
                        status="failed",
                        action="started",
                        error=f"ray task failed: {type(exc).__name__}: {str(exc).splitlines()[0][:300]}",
                    ).model_dump(mode="json")
                )

        threading.Thread(target=settle, daemon=True).start()
        return future

    def check_storage(self, folder: Path, shared: Path) -> list[dict[str, str]]:
        """Every node that may run a sweep run proves it sees `folder` (the sweep's) as the driver does; a node that
        does not stops the sweep here, named (`sandbox.backends.ray.StorageNotSharedError`)."""
        from sandbox.backends.ray import check_shared_storage

        return check_shared_storage(self._ray, folder, shared)

    def interrupt(self) -> None:
        for ref in self._refs:  # SIGTERM-like: the worker's death makes its run stop and keep its state
            with contextlib.suppress(Exception):
                self._ray.cancel(ref, force=True)

    def close(self) -> None:
        self._refs.clear()


def _ray_run(payload_json: str) -> dict[str, Any]:
    """The Ray task body: one worker process, waited for on the node Ray chose."""
    payload = RunAddress.model_validate_json(payload_json)
    _wait_for_previous(payload)
    return launch_worker(payload_json)


def _wait_for_previous(payload: RunAddress, timeout_s: float = 90.0) -> None:
    """A retry must not resume the run while the previous attempt's process is still finishing its interrupt."""
    pid_file = Path(payload.home) / "runs" / payload.run_id / "pid"
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            pid = int(pid_file.read_text().strip())
        except (OSError, ValueError):
            return
        if not procfs.alive(pid):
            return
        time.sleep(0.5)


class ExecutorSettings(Protocol):
    """What an executor is built from: the part of a sweep's spec (`agent.sweeps.spec.SweepSpec` is one) it reads."""

    @property
    def executor(self) -> str: ...

    @property
    def concurrency(self) -> int: ...

    @property
    def ray_address(self) -> str | None: ...


ExecutorFactory = Callable[[ExecutorSettings], Executor]


def _register_builtins() -> None:
    EXECUTORS.register("local", lambda spec: LocalExecutor(spec.concurrency))
    EXECUTORS.register("ray", lambda spec: RayExecutor(spec.ray_address))


EXECUTORS: Registry[ExecutorFactory] = Registry(
    "sweep executor", "rlloop.executors", builtins=_register_builtins, reserved=("auto",), hint="local, ray"
)


def make_executor(spec: ExecutorSettings) -> Executor:
    """The executor `spec.executor` names; "auto" is Ray when a Ray address is given, else local processes."""
    name = spec.executor
    if name == "auto":
        name = "ray" if spec.ray_address else "local"
    return EXECUTORS.get(name)(spec)
