"""Linux's process-lifetime switches, in one place for every package that starts processes (the sandbox's trials,
the agent's children, sweep workers): a child that dies with its parent, and a parent that adopts its orphans.

Both are best effort: off Linux (or without glibc) they do nothing and say so by returning False."""

from __future__ import annotations

import ctypes
import os
import signal
from collections.abc import Callable

PR_SET_PDEATHSIG = 1
PR_SET_CHILD_SUBREAPER = 36


def prctl(option: int, value: int) -> bool:
    """`prctl(option, value)`; True when the kernel accepted it."""
    try:
        return int(ctypes.CDLL("libc.so.6", use_errno=True).prctl(option, value, 0, 0, 0)) == 0
    except (OSError, AttributeError):  # not Linux / no glibc: nothing to arm
        return False


def die_with_parent(sig: int = signal.SIGTERM) -> Callable[[], None]:
    """A `preexec_fn`: the child gets `sig` when the thread that forked it dies, even by SIGKILL.

    If the parent is already gone by the time the child gets here (it died during the fork), the child kills itself
    with `sig` at once instead of running as an orphan."""
    parent = os.getpid()

    def arm() -> None:
        if prctl(PR_SET_PDEATHSIG, sig) and os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return arm


def become_subreaper() -> bool:
    """Orphaned descendants of this process are reparented to it (not to init), so it can find and stop them."""
    return prctl(PR_SET_CHILD_SUBREAPER, 1)
