"""Child processes that never outlive the command that started them (`rlloop ui`, `rlloop grade serve`, ...).

A child runs in its own process group, so one signal reaches everything it starts (MLflow's server workers and job
consumers, a grader's helpers), and with a parent-death signal, so it stops even when its parent is killed with
SIGKILL. SIGTERM, SIGINT (Ctrl-C) and SIGHUP to the parent are passed on to the whole group; when the child is over,
or the parent leaves for any reason, whatever is left of the group is killed.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from collections.abc import Callable, Sequence
from types import FrameType
from typing import Any

PR_SET_PDEATHSIG = 1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The group's keeper (POSIX sh): its stdin is a pipe only the parent writes to: first the group's id, then nothing
# until EOF, which comes when the parent dies, however it dies; then it stops the whole group (a parent-death signal
# reaches the group's leader only, not what the leader started).
KEEPER = (
    'read pgid || exit 0; cat >/dev/null; kill -TERM "-$pgid" 2>/dev/null; '
    'sleep 2; kill -KILL "-$pgid" 2>/dev/null'
)


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn`: the child gets `sig` when the thread that forked it dies, even by SIGKILL.

    If the parent is already gone by the time the child gets here (it died during the fork), the child kills itself
    with `sig` at once instead of running as an orphan."""
    parent = os.getpid()

    def arm() -> None:
        try:
            libc = ctypes.CDLL("libc.so.6", use_errno=True)
            libc.prctl(PR_SET_PDEATHSIG, sig)
        except OSError:
            return
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return arm


def kill_group(pgid: int, grace_s: float = 5.0, first: int = signal.SIGTERM) -> None:
    """Signal every process of the group with `first`, wait up to `grace_s` for them to go, then SIGKILL the rest."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, first)
    deadline = time.monotonic() + grace_s
    while time.monotonic() < deadline and group_alive(pgid):
        time.sleep(0.05)
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def group_alive(pgid: int) -> bool:
    """Whether a process of the group is still running (zombies do not count)."""
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except (OSError, IndexError):
            continue
        if int(fields[2]) == pgid and fields[0] != b"Z":
            return True
    return False


def run_child(cmd: Sequence[str], *, grace_s: float = 10.0, **popen_kw: Any) -> int:
    """Run `cmd` until it ends and return its exit code (128+N when a signal N ended it, like a shell).

    Call from the main thread (signal handlers are set there). A signal to this process is passed on to the
    child's whole group; the child gets `grace_s` to stop after it before the group is killed. If this process is
    killed outright, the child gets SIGTERM (parent-death signal) and a keeper process stops the rest of the group."""
    child: list[subprocess.Popen[bytes]] = []
    signalled_at: list[float] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        signalled_at.append(time.monotonic())
        if child:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(child[0].pid, signum)

    # handlers and keeper first: a signal or a kill that comes while the child starts still reaches all of it
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    keeper = _start_keeper()
    try:
        proc = subprocess.Popen(
            list(cmd), start_new_session=True, preexec_fn=die_with_parent(signal.SIGTERM), **popen_kw
        )
    except BaseException:
        for sig, old in previous.items():
            signal.signal(sig, old)
        _stop_keeper(keeper)
        raise
    child.append(proc)
    if keeper is not None:
        with contextlib.suppress(OSError):
            os.write(keeper[1], f"{proc.pid}\n".encode())
    if signalled_at:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(proc.pid, signal.SIGTERM)
    try:
        while True:
            # polled, not one blocking wait: a wait interrupted by a signal resumes by itself and would not time out
            try:
                code = proc.wait(timeout=0.2)
                break
            except subprocess.TimeoutExpired:
                if signalled_at and time.monotonic() - signalled_at[0] > grace_s:
                    kill_group(proc.pid, grace_s=0)  # signalled, and still not gone after the grace period
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        # helpers of the child that outlived it (or all of it, when we leave by an exception)
        kill_group(proc.pid, grace_s=2.0 if proc.poll() is None or group_alive(proc.pid) else 0)
        proc.wait()
        _stop_keeper(keeper)
    return 128 - code if code < 0 else code


def _start_keeper() -> tuple[subprocess.Popen[bytes], int] | None:
    """Start the group's keeper (see KEEPER) in a session of its own; returns it and the pipe end we hold."""
    read_end, write_end = os.pipe()  # neither end is inherited by the child: only the keeper's stdin is
    try:
        keeper = subprocess.Popen(
            ["sh", "-c", KEEPER, "rlloop-keeper"],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return keeper, write_end


def _stop_keeper(keeper: tuple[subprocess.Popen[bytes], int] | None) -> None:
    """The group is gone: end the keeper before it could signal a group id that may since be reused."""
    if keeper is None:
        return
    proc, write_end = keeper
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    os.close(write_end)
