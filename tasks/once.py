"""The one way rlloop makes a shared thing on first use when several processes may race for it.

Many runs share one RLLOOP_HOME (the service's workers, `rlloop bench`'s, several terminals), and each may be the
first to need the MLflow store, a built-in base model, the results file or the sweep manifest. Whoever comes first
makes it while holding an exclusive `flock` on a lock file beside it; the others wait on the lock, then find it made
and use it. What is made is made into a temporary name and renamed into place (`make_once`), so a process killed
half-way leaves nothing a later one could mistake for finished. flock is released by the kernel when its holder
dies, so a crash never leaves the lock held.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path

LOCKS_DIR = ".locks"  # beside what they guard: RLLOOP_HOME/.locks/<name>.lock


def lock_file(home: Path, name: str) -> Path:
    """The lock guarding the shared thing `name` of RLLOOP_HOME `home`."""
    return home / LOCKS_DIR / f"{name}.lock"


@contextlib.contextmanager
def exclusive(lock: Path, *, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """Hold an exclusive flock on `lock` (made if missing) for the body; `on_wait` is called once if another
    process holds it (to say so), then this one waits for it."""
    lock.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(lock, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if on_wait is not None:
                on_wait()
            fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def make_once(
    target: Path,
    make: Callable[[Path], None],
    *,
    ready: Callable[[Path], bool],
    lock: Path,
    on_wait: Callable[[], None] | None = None,
) -> bool:
    """Make the folder `target` once: `make(tmp)` fills a temporary sibling, renamed to `target` when it returns.
    Returns True when this call made it, False when it was there (made before, or by the process it waited for)."""
    if ready(target):
        return False
    with exclusive(lock, on_wait=on_wait):
        if ready(target):
            return False
        tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
        shutil.rmtree(tmp, ignore_errors=True)
        try:
            make(tmp)
            if target.exists():  # a half-made leftover of a killed process, never ready: replaced
                shutil.rmtree(target)
            os.replace(tmp, target)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
    return True
