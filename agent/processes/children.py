"""Child processes and how they end: the one way rlloop starts a process it owns (`rlloop ui`'s MLflow, `rlloop
grade serve`'s grader, a run's grader, a sweep's workers, the service's run workers) and stops it.

A child runs in a session of its own, so one signal reaches everything it starts (MLflow's server workers and job
consumers, a grader's helpers) and a Ctrl-C in the terminal reaches only us, and with a parent-death signal, so it
stops even when its parent is killed with SIGKILL. Stopping it stops its whole tree: its process group, and every
process below it found in /proc (helpers that moved to a group or session of their own). A keeper process stops the
group when the parent dies without a chance to (SIGKILL): a parent-death signal reaches the child only. A sweep's
worker gets the death signal without a keeper (it needs time to finalize its run); the service's run workers get
neither, as they outlive the service on purpose.

`spawn_child` starts one and returns a `Child` to stop later; `run_child` runs one to its end in the foreground,
passing SIGTERM, SIGINT (Ctrl-C) and SIGHUP on to it.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from collections.abc import Callable, Iterable, Sequence
from types import FrameType
from typing import Any

from tasks import procfs
from tasks.lifetime import become_subreaper, die_with_parent

FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
# The group's keeper (POSIX sh): its stdin is a pipe only the parent writes to: first the group's id, then nothing
# until EOF, which comes when the parent dies, however it dies; then it stops the whole group.
# The child writes its group's id itself, before its program starts (the pipe's write end is open until exec).
KEEPER = (
    'read pgid || exit 0; cat >/dev/null; kill -TERM "-$pgid" 2>/dev/null; '
    'sleep 2; kill -KILL "-$pgid" 2>/dev/null'
)


# ---- the process table (tasks.procfs: one reader, one rule for a process that is gone) ---------------------------
def tree(root: int, *, group: bool = True) -> set[int]:
    """The live processes below `root`: its children, theirs, and so on, and (with `group`) the members of the
    process group `root` leads, with what lies below them. Zombies do not count: they are gone but for their exit
    status."""
    table = procfs.table()
    found = {pid for pid, p in table.items() if group and p.pgid == root and pid != root}
    frontier = [root, *found]
    while frontier:
        parent = frontier.pop()
        for pid, p in table.items():
            if p.ppid == parent and pid not in found and pid != root:
                found.add(pid)
                frontier.append(pid)
    return {pid for pid in found if not table[pid].gone}


def _signal(pids: Iterable[int], sig: int) -> None:
    for pid in pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, sig)


def kill_tree(root: int, grace_s: float = 5.0, first: int = signal.SIGTERM) -> None:
    """Stop `root`, its process group and every process below it (see `tree`): `first` to all, up to `grace_s`
    for them to go, then SIGKILL to what is left."""
    _kill_all(lambda: tree(root) | ({root} if procfs.alive(root) else set()), grace_s, first, group=root)


def _kill_all(scan: Callable[[], set[int]], grace_s: float, first: int, group: int | None = None) -> None:
    """Signal what `scan` finds and wait for it to go. The tree is read before the first signal (a helper whose
    parent dies is reparented, and no longer found below it) and again while waiting (a process may still start
    one)."""
    targets = scan()
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, first)
    _signal(targets, first)
    deadline = time.monotonic() + grace_s
    while True:
        for pid in [p for p in targets if procfs.alive(p)]:
            targets |= tree(pid)
        targets = {pid for pid in targets | scan() if procfs.alive(pid)}
        if not targets or time.monotonic() >= deadline:
            break
        time.sleep(0.05)
    if group is not None:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(group, signal.SIGKILL)
    _signal(targets, signal.SIGKILL)


# ---- one child -----------------------------------------------------------------------------------------------------
Keeper = tuple[subprocess.Popen[bytes], int]  # the keeper process and the write end of its stdin


class Child:
    """A started child (see `spawn_child`) and its keeper. `stop` ends all of it; so does our death."""

    def __init__(self, proc: subprocess.Popen[bytes], keeper: Keeper | None) -> None:
        self.proc = proc
        self._keeper = keeper

    @property
    def pid(self) -> int:
        return self.proc.pid

    def poll(self) -> int | None:
        return self.proc.poll()

    def send(self, sig: int) -> None:
        """Send `sig` to the child's process group (all of it that stayed in the group)."""
        signal_group(self.proc.pid, sig)

    def interrupt(self, grace_s: float = 60.0) -> int:
        """SIGTERM to the child alone, which stops what it started its own way (a sweep's run ends its trial and
        writes its results row); what is left of its tree after `grace_s` is killed. Returns its exit code."""
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(signal.SIGTERM)
            with contextlib.suppress(subprocess.TimeoutExpired):
                self.proc.wait(timeout=grace_s)
        return self.stop(grace_s=0.0, first=signal.SIGKILL)

    def stop(self, grace_s: float = 10.0, first: int = signal.SIGTERM) -> int:
        """End the child and its whole tree (`first`, then SIGKILL after `grace_s`); returns its exit code."""
        if self.proc.poll() is None or tree(self.proc.pid):
            kill_tree(self.proc.pid, grace_s=grace_s, first=first)
        code = self.proc.wait()
        _stop_keeper(self._keeper)  # the group is gone: before the keeper could signal a reused group id
        self._keeper = None
        return code


def spawn_child(
    cmd: Sequence[str], *, death_signal: int | None = signal.SIGTERM, keeper: bool = True, **popen_kw: Any
) -> Child:
    """Start `cmd` in a session of its own, with `death_signal` as its parent-death signal and a keeper that stops
    its group when we die. `popen_kw` goes to `subprocess.Popen` (stdout, env, cwd, ...).

    `keeper=False`: the death signal alone, for a child that must be left time to stop its own way (a sweep worker
    finalizing its run). `death_signal=None` and `keeper=False`: a child that outlives us on purpose (the service's
    run workers, adopted by the next service)."""
    kept = (
        _start_keeper() if keeper else None
    )  # first: a kill that comes while the child starts reaches all of it
    arm = die_with_parent(death_signal) if death_signal is not None else None

    def prepare() -> None:  # in the child, before its program starts
        if arm is not None:
            arm()
        if kept is not None:  # the keeper learns the group before the program can start anything
            with contextlib.suppress(OSError):
                os.write(kept[1], f"{os.getpid()}\n".encode())

    preexec = prepare if arm is not None or kept is not None else None
    try:
        proc = subprocess.Popen(list(cmd), start_new_session=True, preexec_fn=preexec, **popen_kw)
    except BaseException:
        _stop_keeper(kept)
        raise
    return Child(proc, kept)


def signal_group(pgid: int, sig: int) -> None:
    """Send `sig` to the process group a child leads (its own session's); to the leader alone where the group
    cannot be signalled. A group that is gone is left alone."""
    try:
        os.killpg(pgid, sig)
    except ProcessLookupError:
        pass
    except PermissionError:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pgid, sig)


def run_child(cmd: Sequence[str], *, grace_s: float = 10.0, **popen_kw: Any) -> int:
    """Run `cmd` until it ends and return its exit code (128+N when a signal N ended it, like a shell).

    Call from the main thread of a process that does nothing else: signal handlers are set, and the process
    becomes its descendants' subreaper, so a helper of the child that loses its parent is reparented to us, not to
    init, and is still found and stopped. A signal to this process is passed on to the child's group; the child
    gets `grace_s` to stop after it before its whole tree is killed. If this process is killed outright, the child
    gets SIGTERM and the keeper stops its group."""
    child: list[Child] = []
    signalled_at: list[float] = []

    def forward(signum: int, frame: FrameType | None) -> None:
        signalled_at.append(time.monotonic())
        if child:
            child[0].send(signum)

    # handlers first: a signal that comes while the child starts still reaches all of it
    previous = {sig: signal.signal(sig, forward) for sig in FORWARDED}
    become_subreaper()
    try:
        child.append(spawn_child(cmd, death_signal=signal.SIGTERM, **popen_kw))
        if signalled_at:
            child[0].send(signal.SIGTERM)
        _wait(child[0], signalled_at, grace_s)
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)
        code = (
            child[0].stop(grace_s=2.0) if child else 0
        )  # what outlived it (all of it, if we leave by an error)
        _stop_orphans()
    return 128 - code if code < 0 else code


def _wait(child: Child, signalled_at: list[float], grace_s: float) -> None:
    """Wait for the child to exit; once signalled, give it `grace_s` before killing its tree."""
    while True:
        # polled, not one blocking wait: a wait interrupted by a signal resumes by itself and would not time out
        try:
            child.proc.wait(timeout=0.2)
            return
        except subprocess.TimeoutExpired:
            if signalled_at and time.monotonic() - signalled_at[0] > grace_s:
                kill_tree(child.pid, grace_s=0)  # signalled, and still not gone after the grace period


def _stop_orphans() -> None:
    """Stop the helpers reparented to us (we are their subreaper) and collect their exit status."""
    me = os.getpid()
    _kill_all(lambda: tree(me, group=False), grace_s=2.0, first=signal.SIGTERM)
    for pid, p in procfs.table().items():
        if p.ppid == me and p.gone:
            with contextlib.suppress(ChildProcessError):
                os.waitpid(pid, os.WNOHANG)


def _start_keeper() -> Keeper | None:
    """Start the group's keeper (see KEEPER) in a session of its own; returns it and the pipe end we hold."""
    read_end, write_end = os.pipe()  # neither end is inherited by the child: only the keeper's stdin is
    try:
        keeper = subprocess.Popen(
            ["sh", "-c", KEEPER, "rlloop-keeper"],
            stdin=read_end,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
            env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")},  # none of our secrets
        )
    except OSError:
        os.close(write_end)
        return None
    finally:
        os.close(read_end)
    return keeper, write_end


def _stop_keeper(keeper: Keeper | None) -> None:
    if keeper is None:
        return
    proc, write_end = keeper
    with contextlib.suppress(ProcessLookupError):
        os.killpg(proc.pid, signal.SIGKILL)
    proc.wait()
    os.close(write_end)
