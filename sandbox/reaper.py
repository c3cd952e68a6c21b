"""Every sandbox run that is alive right now, so one call can stop them all (Ctrl-C, SIGTERM, exit).

Backends register a stop callback for each live run and drop it when the run is over. `kill_all()` is what a
signal handler or `atexit` calls: the run that was stopped this way reports `interrupted=True`.
"""

from __future__ import annotations

import atexit
import contextlib
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

_lock = threading.Lock()
_live: dict[str, Callable[[], None]] = {}
_installed = False


def register(key: str, stop: Callable[[], None]) -> None:
    with _lock:
        _live[key] = stop


def unregister(key: str) -> None:
    with _lock:
        _live.pop(key, None)


def live_count() -> int:
    with _lock:
        return len(_live)


def kill_all() -> int:
    """Stop every live sandbox run of this process; return how many were stopped."""
    with _lock:
        stops = list(_live.values())
    for stop in stops:
        with contextlib.suppress(Exception):  # one failing stop must not keep the others alive
            stop()
    return len(stops)


def install_signal_handlers(signals: tuple[int, ...] = (signal.SIGTERM, signal.SIGHUP)) -> None:
    """On these signals stop every live run, then do what the previous handler would have done.

    Call from the main thread of a long-lived process (the service, the CLI). Ctrl-C needs no handler: a run
    that sees KeyboardInterrupt stops its own command before re-raising.
    """
    global _installed
    if _installed:
        return
    for signum in signals:
        previous = signal.getsignal(signum)

        def handler(sig: int, frame: FrameType | None, _previous: Any = previous) -> None:
            kill_all()
            if callable(_previous):
                _previous(sig, frame)
            elif _previous == signal.SIG_IGN:
                return
            else:
                raise SystemExit(128 + sig)

        signal.signal(signum, handler)
    _installed = True


atexit.register(kill_all)
