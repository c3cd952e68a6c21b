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
from sandbox.devices import (
    DeviceBusyError,
    NoGPUError,
    gpu_lease,
    machine_gpus,
    plan_devices,
    visible_gpu_ids,
)

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
        log_path=workspace.parent / "log.txt",
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


def fake_nvidia_smi(folder: Path, count: int) -> Path:
    """A stand-in `nvidia-smi` on PATH listing `count` GPUs, as the real one answers --query-gpu=index."""
    folder.mkdir(parents=True, exist_ok=True)
    program = folder / "nvidia-smi"
    lines = "".join(f"{i}\\n" for i in range(count))
    program.write_text(f"#!/bin/sh\nprintf '{lines}'\n")
    program.chmod(0o755)
    return folder


def test_the_plan_finds_gpus_keeps_one_for_the_grader_and_leases_free_ones_first(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{fake_nvidia_smi(tmp_path / 'bin', 3)}{os.pathsep}{os.environ['PATH']}")
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    assert machine_gpus() == ["0", "1", "2"]
    plan = plan_devices(1)
    assert (plan.grader_gpu, plan.trial_pool, plan.grader_shares) == ("2", ("0", "1"), False)
    assert plan.grader_env()["CUDA_VISIBLE_DEVICES"] == "2"
    assert plan.for_trial() == [0]
    with gpu_lease([0], "another run's trial"):  # held: the next trial gets the free one
        assert plan.for_trial() == [1]
    monkeypatch.setenv(
        "CUDA_VISIBLE_DEVICES", "1"
    )  # the run was given GPU 1 only: trials and grader take turns
    shared = plan_devices(1)
    assert (shared.gpus, shared.grader_gpu, shared.grader_shares, shared.for_trial()) == (
        ("1",),
        "1",
        True,
        [1],
    )
    assert "taking turns" in shared.describe()
    with pytest.raises(NoGPUError, match=r"--trial-gpus 2 needs 2 GPUs per trial but only 1 were found"):
        plan_devices(2)


def test_without_gpus_the_grader_gets_none_and_asking_for_one_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))  # no nvidia-smi at all
    plan = plan_devices(0)
    assert plan.gpus == () and plan.grader_env()["CUDA_VISIBLE_DEVICES"] == "" and plan.for_trial() == []
    with pytest.raises(NoGPUError, match=r"^no GPU found: --trial-gpus 1 .*no nvidia-smi.*--trial-gpus 0"):
        plan_devices(1)
    monkeypatch.setenv("PATH", str(fake_nvidia_smi(tmp_path / "bin", 2)))
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    with pytest.raises(NoGPUError, match="CUDA_VISIBLE_DEVICES='' leaves none"):
        plan_devices(1)


@pytest.mark.parametrize("gpus", [[], [78]])
def test_a_gpu_trial_gets_its_devices_and_no_address_space_limit_and_its_log_says_why(
    gpus: list[int], tmp_path: Path
) -> None:
    workspace = tmp_path / "ws"
    workspace.mkdir()
    request = SandboxRequest(
        command=["sh", "-c", 'echo "visible=$CUDA_VISIBLE_DEVICES order=$CUDA_DEVICE_ORDER as=$(ulimit -v)"'],
        workspace=workspace,
        log_path=workspace.parent / "log.txt",
        memory_mb=512,
        gpus=gpus,
    )
    result = LocalSandbox(use_cgroup=False, isolate=False).run(request)
    assert result.ok, result.reason()
    if gpus:
        assert "visible=78 order=PCI_BUS_ID as=unlimited" in result.log_tail
        assert "no memory limit for this GPU trial (memory_mb=512 not enforced)" in result.log_tail
    else:
        assert f"visible= order= as={512 * 1024}" in result.log_tail
        assert "no memory limit" not in result.log_tail
