"""GPU leases: one holder per device across every process on the machine.

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
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import IO

log = logging.getLogger(__name__)
POLL_S = 0.2


class DeviceBusyError(TimeoutError):
    """A device stayed leased by someone else for longer than the caller would wait."""


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
