"""GPU leases across processes: a second user of a device waits, a dead holder frees it, sandboxes take it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.local import LocalSandbox
from sandbox.base import SandboxRequest
from sandbox.devices import DeviceBusyError, gpu_lease, visible_gpu_ids

HOLD = """
import pathlib, sys, time
from sandbox.devices import gpu_lease
with gpu_lease([sys.argv[1]], holder="the test holder"):
    print("held", flush=True)
    time.sleep(float(sys.argv[2]))
    pathlib.Path(sys.argv[3]).write_text(repr(time.time()))
"""


@pytest.fixture(autouse=True)
def _own_lock_dir(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLOOP_DEVICE_LOCK_DIR", str(tmp_path / "locks"))


@pytest.fixture
def holder(tmp_path: Path) -> Iterator[tuple[subprocess.Popen[str], Path]]:
    """Another process holding GPU 77 for 3 s; it writes the time it lets go."""
    released = tmp_path / "released"
    proc = subprocess.Popen(
        [sys.executable, "-c", HOLD, "77", "3", str(released)], stdout=subprocess.PIPE, text=True
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "held"
    yield proc, released
    proc.kill()
    proc.wait()


def test_a_busy_device_names_its_holder_and_a_dead_holder_frees_it(
    holder: tuple[subprocess.Popen[str], Path],
) -> None:
    proc, _ = holder
    waits: list[str] = []
    with (
        pytest.raises(DeviceBusyError, match="the test holder"),
        gpu_lease([77], "me", timeout_s=0.5, on_wait=waits.append),
    ):
        pass
    assert waits and "GPU 77 is in use by the test holder" in waits[0]
    os.kill(proc.pid, signal.SIGKILL)  # no clean exit: the kernel drops the lock with the process
    proc.wait()
    with gpu_lease([77], "me", timeout_s=2):
        pass
    with gpu_lease([], "me", timeout_s=0):  # no devices: nothing to wait for
        pass


def test_a_sandboxed_trial_waits_for_the_gpu_outside_its_time_limit(
    holder: tuple[subprocess.Popen[str], Path], tmp_path: Path
) -> None:
    _, released = holder
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = SandboxRequest(
        command=["sh", "-c", "date +%s.%N"],
        workspace=workspace,
        log_path=workspace / "log.txt",
        gpus=[77],
        timeout_s=2,  # shorter than the 3 s wait: waiting for the device does not count against the trial
        labels={"rlloop.trial": "t01", "rlloop.run": "r"},
    )
    result = LocalSandbox().run(request)
    assert result.ok, result.reason()
    started = float(result.log_tail.strip().splitlines()[-1])
    assert started >= float(released.read_text())  # the trial ran only after the holder let go
    assert request.describe() == "trial t01 of run r"


def test_visible_gpu_ids_follow_cuda_visible_devices(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "3,1")
    assert visible_gpu_ids(1) == ["3"] and visible_gpu_ids(2) == ["3", "1"]
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES")
    assert visible_gpu_ids(2) == ["0", "1"]
