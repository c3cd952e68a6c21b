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

from sandbox.base import SandboxRequest, SandboxResult
from tests.sandbox.conftest import running_with

ray = pytest.importorskip("ray")
pytestmark = pytest.mark.ray

# Marks that it is training, then sleeps. On a second attempt (marker file present) it finishes at once. Its pids
# are found from the host by a unique argument (inside the local sandbox's PID namespace its own mean nothing).
TRIAL = r"""
import os, sys, time
if os.path.exists("attempted"):
    print("second attempt done"); sys.exit(0)
open("attempted", "w").write("1")
open("pids", "w").write("started")
print("training", flush=True)
time.sleep(120)
"""


@pytest.fixture(scope="module")
def local_ray() -> Iterator[None]:
    # address "local": a new instance of its own, never a cluster another test (or `ray start`) runs here
    ray.init(
        address="local",
        num_cpus=2,
        object_store_memory=80 * 1024**2,
        include_dashboard=False,
        log_to_driver=False,
    )
    yield
    ray.shutdown()


def _request(workspace: Path, code: str, token: str = "-") -> SandboxRequest:
    return SandboxRequest(
        command=[sys.executable, "-c", code, token],
        workspace=workspace,
        log_path=workspace.parent / "log.txt",
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
    assert "hello from" in (workspace.parent / "log.txt").read_text()


def _parent(pid: int) -> int:
    with open(f"/proc/{pid}/stat", "rb") as f:
        return int(f.read().rsplit(b")", 1)[1].split()[1])


def _kill_worker_when_training(workspace: Path, token: str) -> list[int]:
    """SIGKILL the Ray worker that runs the trial: the parent of the trial's outermost process (bubblewrap, or the
    trial itself when unisolated). Returns the trial's processes."""
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and not (workspace / "pids").exists():
        time.sleep(0.1)
    tree = running_with(token)
    outermost = [p for p in tree if _parent(p) not in tree]
    assert len(outermost) == 1, (tree, outermost)
    os.kill(_parent(outermost[0]), signal.SIGKILL)
    return tree


def _run_killing_the_worker(workspace: Path, token: str, max_retries: int) -> SandboxResult:
    """Run TRIAL on a local Ray, SIGKILLing the worker that runs it once it trains."""
    import threading

    from sandbox.backends.ray import RaySandbox

    killer = threading.Thread(target=_kill_worker_when_training, args=(workspace, token))
    killer.start()
    result = RaySandbox(inner="local", max_retries=max_retries).run(_request(workspace, TRIAL, token))
    killer.join()
    return result


def test_worker_killed_mid_trial_is_a_failed_trial_with_nothing_left(
    local_ray: None, workspace: Path, token: str
) -> None:
    result = _run_killing_the_worker(workspace, token, max_retries=0)
    assert not result.ok and getattr(result, "worker_lost", False)
    assert "Ray worker" in result.reason()
    assert "died" in (workspace.parent / "log.txt").read_text()
    deadline = time.monotonic() + 15
    while running_with(token) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not running_with(token), "the trial outlived its worker"


def test_worker_killed_mid_trial_is_retried_when_configured(
    local_ray: None, workspace: Path, token: str
) -> None:
    result = _run_killing_the_worker(workspace, token, max_retries=1)
    assert result.ok, result.log_tail
    assert "second attempt done" in (workspace.parent / "log.txt").read_text()
