"""The machine's GPUs: which ones a run may use (`plan_devices`), and leases, one holder per device across every
process on the machine.

A run finds the GPUs (`nvidia-smi`, narrowed to CUDA_VISIBLE_DEVICES when that is set) once, at start-up, and plans
them: the grader evaluates on one of its own when trials leave one spare, else it takes turns with the trials on the
same device through the lease; each trial asks `DevicePlan.for_trial` for `--trial-gpus` devices, free ones first.
Ids are machine-wide `nvidia-smi` indices, and every process given one also gets CUDA_DEVICE_ORDER=PCI_BUS_ID, so
CUDA numbers the devices as nvidia-smi does.

The grader evaluates and trials train on a GPU one at a time: each takes the device's lease, an exclusive `flock` on
`<lock dir>/gpu-<id>.lock`, for as long as it uses the device, and whoever comes second waits. The kernel drops a lock
when its holder dies, so a crashed trial or grader never leaves a device locked. The lock dir is machine-wide
(`RLLOOP_DEVICE_LOCK_DIR`, default `<tmp>/rlloop-devices`), so separate runs and sweeps on one machine share it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import shutil
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
POLL_S = 0.2


DEVICE_ORDER = {
    "CUDA_DEVICE_ORDER": "PCI_BUS_ID"
}  # CUDA's numbering = nvidia-smi's, for every process given ids


class DeviceBusyError(TimeoutError):
    """A device stayed leased by someone else for longer than the caller would wait."""


class NoGPUError(ValueError):
    """The run asks for more GPUs per trial than this machine has; the message is one line that says what to do."""


def machine_gpus() -> list[str]:
    """The GPUs a run on this machine may use: nvidia-smi's indices, narrowed to CUDA_VISIBLE_DEVICES when it is
    set (an empty CUDA_VISIBLE_DEVICES means none). No nvidia-smi, or one that fails: no GPUs."""
    program = shutil.which("nvidia-smi")
    if program is None:
        return []
    try:
        out = subprocess.run(
            [program, "--query-gpu=index", "--format=csv,noheader"],
            capture_output=True,
            text=True,
            timeout=30,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if out.returncode != 0:
        return []
    found = [line.strip() for line in out.stdout.splitlines() if line.strip().isdigit()]
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    if visible is None:
        return found
    allowed = [d.strip() for d in visible.split(",") if d.strip()]
    return [d for d in allowed if d in found]


def _is_free(device: str) -> bool:
    """Whether nobody holds `device`'s lease right now (a look, not a claim: the lease is taken when a run starts)."""
    handle = _open_lock(device)
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return False
    finally:
        handle.close()  # closing drops a lock we got
    return True


@dataclass(frozen=True)
class DevicePlan:
    """Which of the machine's GPUs a run's trials and its grader use. `gpus` is every GPU found."""

    gpus: tuple[str, ...]
    trial_gpus: int
    grader_gpu: str | None  # None: the grader evaluates on CPU

    @property
    def trial_pool(self) -> tuple[str, ...]:
        """The devices trials are leased from: all but the grader's own when trials leave it one spare."""
        if self.grader_gpu is not None and len(self.gpus) > self.trial_gpus:
            return tuple(g for g in self.gpus if g != self.grader_gpu)
        return self.gpus

    @property
    def grader_shares(self) -> bool:
        """The grader takes turns with the trials on a device (one lease, never at the same time)."""
        return self.grader_gpu is not None and self.grader_gpu in self.trial_pool and self.trial_gpus > 0

    def for_trial(self) -> list[int]:
        """`trial_gpus` devices of the pool for the next trial, free ones first; the sandbox leases them while the
        trial runs (waiting, outside the trial's time limit, for any still held by another run)."""
        if not self.trial_gpus:
            return []
        pool = list(self.trial_pool)
        ranked = sorted(pool, key=lambda g: (not _is_free(g), pool.index(g)))
        return [int(g) for g in ranked[: self.trial_gpus]]

    def grader_env(self) -> dict[str, str]:
        """The grader's CUDA_VISIBLE_DEVICES: its one device, or "" (CPU)."""
        return {"CUDA_VISIBLE_DEVICES": self.grader_gpu or "", **DEVICE_ORDER}

    def describe(self) -> str:
        """One line for the run log."""
        if not self.gpus:
            return "devices: no GPU found; trials and the grader run on CPU"
        trials = (
            f"{self.trial_gpus} GPU(s) per trial from {','.join(self.trial_pool)}"
            if self.trial_gpus
            else "trials on CPU"
        )
        grader = f"grader on GPU {self.grader_gpu}" + (
            " (taking turns with trials through the device lease)" if self.grader_shares else ""
        )
        return f"devices: GPUs {','.join(self.gpus)}; {trials}; {grader}"


def plan_devices(trial_gpus: int, gpus: Sequence[str] | None = None) -> DevicePlan:
    """Plan the machine's GPUs (`machine_gpus()` unless given) for a run with `trial_gpus` per trial; NoGPUError,
    one line, when there are fewer than that."""
    found = tuple(machine_gpus() if gpus is None else gpus)
    if trial_gpus > 0 and not found:
        visible = os.environ.get("CUDA_VISIBLE_DEVICES")
        where = (
            f"CUDA_VISIBLE_DEVICES={visible!r} leaves none"
            if visible is not None and shutil.which("nvidia-smi")
            else "nvidia-smi lists none"
            if shutil.which("nvidia-smi")
            else "there is no nvidia-smi (no NVIDIA driver)"
        )
        raise NoGPUError(
            f"no GPU found: --trial-gpus {trial_gpus} needs {trial_gpus} CUDA GPU(s) per trial and {where}; "
            "run with --trial-gpus 0 to train on CPU"
        )
    if trial_gpus > len(found):
        raise NoGPUError(
            f"--trial-gpus {trial_gpus} needs {trial_gpus} GPUs per trial but only {len(found)} were found "
            f"({','.join(found)}); lower --trial-gpus"
        )
    grader = found[-1] if found else None  # the last: trials take the first ones
    return DevicePlan(gpus=found, trial_gpus=trial_gpus, grader_gpu=grader)


def lock_dir() -> Path:
    return Path(os.environ.get("RLLOOP_DEVICE_LOCK_DIR") or Path(tempfile.gettempdir()) / "rlloop-devices")


def visible_gpu_ids(count: int = 1) -> list[str]:
    """Machine-wide ids of this process's first `count` CUDA devices (CUDA_VISIBLE_DEVICES renumbers them)."""
    visible = [d.strip() for d in os.environ.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    return (visible or [str(i) for i in range(count)])[:count]


def _open_lock(device: str) -> IO[str]:
    folder = lock_dir()
    folder.mkdir(parents=True, exist_ok=True)
    with contextlib.suppress(PermissionError):
        folder.chmod(0o1777)  # shared by every user's runs, like /tmp
    path = folder / f"gpu-{device}.lock"
    handle = open(path, "a+")  # noqa: SIM115 - held open for the lease's lifetime
    with contextlib.suppress(PermissionError):
        path.chmod(0o666)
    return handle


def _holder_of(handle: IO[str]) -> str:
    handle.seek(0)
    return handle.read().strip() or "another process"


def _acquire(
    device: str, holder: str, timeout_s: float | None, on_wait: Callable[[str], None] | None
) -> IO[str]:
    handle = _open_lock(device)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    told = False
    while True:
        try:
            fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            break
        except BlockingIOError:
            if not told:
                message = f"GPU {device} is in use by {_holder_of(handle)}; {holder} waits for it"
                log.info(message)
                if on_wait:
                    on_wait(message)
                told = True
            if deadline is not None and time.monotonic() >= deadline:
                who = _holder_of(handle)
                handle.close()
                raise DeviceBusyError(
                    f"GPU {device} stayed in use by {who} for {timeout_s:.0f}s; wait for it to finish or free the GPU"
                ) from None
            time.sleep(POLL_S)
    handle.seek(0)
    handle.truncate()
    handle.write(f"{holder} (pid {os.getpid()})")
    handle.flush()
    return handle


@contextlib.contextmanager
def gpu_lease(
    devices: Sequence[int | str],
    holder: str,
    *,
    timeout_s: float | None = None,
    on_wait: Callable[[str], None] | None = None,
) -> Iterator[None]:
    """Hold every device in `devices` (none: a no-op) until the block ends; waits while another process holds one.

    Devices are taken in sorted order, so two holders of overlapping sets cannot deadlock.
    """
    held: list[IO[str]] = []
    try:
        for device in sorted({str(d) for d in devices}):
            held.append(_acquire(device, holder, timeout_s, on_wait))
        yield
    finally:
        for handle in reversed(held):
            handle.seek(0)
            handle.truncate()
            fcntl.flock(handle, fcntl.LOCK_UN)
            handle.close()
