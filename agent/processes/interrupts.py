"""How a run is stopped from outside: Ctrl-C and SIGTERM become one exception, and crash tests kill it on purpose.

Both the research loop and the external-agent path turn signals into `RunInterrupted`, so that stopping children
and writing the results row happen in one `except` each, not in signal handlers.
"""

from __future__ import annotations

import contextlib
import os
import signal
import threading
from collections.abc import Iterator
from types import FrameType


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: stop children, keep everything written so far."""


@contextlib.contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Turn SIGTERM (and SIGINT) into RunInterrupted, so cleanup runs in one place."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise RunInterrupted(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def interrupts_in_main_thread() -> contextlib.AbstractContextManager[None]:
    """`interrupts_as_exceptions` in the main thread; nothing elsewhere (signal handlers cannot be set there)."""
    if threading.current_thread() is threading.main_thread():
        return interrupts_as_exceptions()
    return contextlib.nullcontext()


def failpoint(name: str, index: int | None = None) -> None:
    """Crash-test hook: `RLLOOP_FAILPOINT=run_trial:2` kills this process with SIGKILL at that point of trial 2,
    exactly like `kill -9` would. Unset in normal use; the resume tests use it to crash at every node."""
    target = os.environ.get("RLLOOP_FAILPOINT")
    if not target:
        return
    where, _, trial = target.partition(":")
    if where == name and (not trial or index is None or int(trial) == index):
        os.kill(os.getpid(), signal.SIGKILL)
