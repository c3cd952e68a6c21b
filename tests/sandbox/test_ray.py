"""The ray backend against a real local Ray instance: a trial runs as a task, and a worker killed mid-trial ends
as a failed trial (or is retried) with nothing left running."""

from __future__ import annotations

import os
import signal
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.base import SandboxRequest
from tests.sandbox.conftest import alive

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

# Records its own pid and its parent's (the Ray worker, for the local inner sandbox), then sleeps. On a second
# attempt (marker file present) it finishes at once.
TRIAL = r"""
import os, sys, time
if os.path.exists("attempted"):
    print("second attempt done"); sys.exit(0)
open("attempted", "w").write("1")
open("pids", "w").write(f"{os.getpid()} {os.getppid()}")
print("training", flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    ray.init(num_cpus=2, object_store_memory=80 * 1024**2, include_dashboard=False, log_to_driver=False)
    yield
    ray.shutdown()


def _request(workspace: Path, code: str) -> SandboxRequest:
    return SandboxRequest(
        command=[sys.executable, "-c", code],
        workspace=workspace,
        log_path=workspace / "log.txt",
        timeout_s=120,
        memory_mb=512,
        cpus=1,
        labels={"rlloop.run": "r", "rlloop.trial": "t01"},
    )


def test_registered_and_runs_a_trial_as_a_task(local_ray: None, workspace: Path) -> None:
    from sandbox.registry import get_sandbox, list_backends

    assert "ray" in list_backends()
    sandbox = get_sandbox("ray", inner="local")
    result = sandbox.run(
        _request(workspace, "import os; print('hello from', os.environ['RLLOOP_RAY_TRIAL'][:4])")
    )
    assert result.ok, result.log_tail
    assert result.backend == "ray/local"
    assert "hello from" in (workspace / "log.txt").read_text()


def _kill_worker_when_training(workspace: Path) -> tuple[int, int]:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (workspace / "pids").exists():
        time.sleep(0.1)
    trial_pid, worker_pid = map(int, (workspace / "pids").read_text().split())
    os.kill(worker_pid, signal.SIGKILL)
    return trial_pid, worker_pid


def test_worker_killed_mid_trial_is_a_failed_trial_with_nothing_left(
    local_ray: None, workspace: Path
) -> None:
    import threading

    from sandbox.backends.ray import RaySandbox

    pids: list[tuple[int, int]] = []
    killer = threading.Thread(target=lambda: pids.append(_kill_worker_when_training(workspace)))
    killer.start()
    result = RaySandbox(inner="local", max_retries=0).run(_request(workspace, TRIAL))
    killer.join()
    assert not result.ok and getattr(result, "worker_lost", False)
    assert "Ray worker" in result.reason()
    assert "died" in (workspace / "log.txt").read_text()
    trial_pid = pids[0][0]
    deadline = time.monotonic() + 15
    while alive(trial_pid) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not alive(trial_pid), "the trial outlived its worker"


def test_worker_killed_mid_trial_is_retried_when_configured(local_ray: None, workspace: Path) -> None:
    import threading

    from sandbox.backends.ray import RaySandbox

    killer = threading.Thread(target=_kill_worker_when_training, args=(workspace,))
    killer.start()
    result = RaySandbox(inner="local", max_retries=1).run(_request(workspace, TRIAL))
    killer.join()
    assert result.ok, result.log_tail
    assert "second attempt done" in (workspace / "log.txt").read_text()
