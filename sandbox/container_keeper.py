"""A container's lifeline, held on the host side of the engine where no trial can reach it.

Inside its container a trial can signal every process of its own user, the in-container watchdog included
(`kill -9 -1`, or a kill of whatever names "rlloop-watchdog"); it cannot signal, trace or write to a process on the
host. So each process that starts containers has one keeper beside it: a small process of its own session (a
Ctrl-C or a group's SIGTERM reaches the process that started the trials, which stops them itself, not the keeper),
ignoring SIGINT, SIGTERM and SIGHUP, whose stdin is a pipe only that process writes to: `+<id>` when a container is
created, `-<id>` when it is removed. At EOF, which comes when the process is gone however it went (SIGKILL
included), the keeper kills every container it still holds through the engine, and exits; the exited container stays
for the next `cleanup()` (a resumed run's first step) to remove and name, as the in-container watchdog leaves it.

`hold` and `release` are the host's side (`sandbox.backends.docker`); `python -m sandbox.container_keeper` is the
keeper.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import threading


class ContainerKeeper:
    """This process's keeper: started on the first `hold`, told of each container, started again if it died."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._owner = 0  # the pid that started it: a forked child starts a keeper of its own
        self._held: set[str] = set()

    def hold(self, container_id: str) -> None:
        """From now until `release`, the container is killed if this process dies. Raises when no keeper can be
        started (a trial must not start without its lifeline)."""
        with self._lock:
            self._held.add(container_id)
            self._send(f"+{container_id}\n")

    def release(self, container_id: str) -> None:
        """The container is gone (removed by its run): nothing to kill for it any more."""
        with self._lock:
            self._held.discard(container_id)
            if self._live():
                with contextlib.suppress(OSError):
                    self._write(f"-{container_id}\n")

    def pid(self) -> int | None:
        """The keeper's pid while one runs for this process (tests end it to see what holds without it)."""
        with self._lock:
            return self._proc.pid if self._live() and self._proc is not None else None

    def _live(self) -> bool:
        return self._proc is not None and self._owner == os.getpid() and self._proc.poll() is None

    def _send(self, line: str) -> None:
        for _ in range(2):  # a keeper that died (killed from the host) is replaced once, with every held id
            try:
                if not self._live():
                    self._start()
                self._write(line)
                return
            except OSError:
                self._proc = None
        raise RuntimeError("could not start the container keeper (`python -m sandbox.container_keeper`)")

    def _start(self) -> None:
        self._proc = subprocess.Popen(
            [sys.executable, "-m", "sandbox.container_keeper"],
            stdin=subprocess.PIPE,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        self._owner = os.getpid()
        self._write("".join(f"+{held}\n" for held in sorted(self._held)))

    def _write(self, text: str) -> None:
        assert self._proc is not None and self._proc.stdin is not None
        self._proc.stdin.write(text.encode())
        self._proc.stdin.flush()


KEEPER = ContainerKeeper()


def keep_until_eof() -> None:
    """The keeper: read `+id`/`-id` lines until EOF, then kill what is still held."""
    for sig in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        signal.signal(sig, signal.SIG_IGN)
    from sandbox.dockerlib import docker_sdk

    # the client is made before EOF, so the kill is not kept waiting for the SDK's import
    client = docker_sdk().from_env(timeout=30)
    held: set[str] = set()
    for raw in sys.stdin.buffer:
        line = raw.decode(errors="replace").strip()
        if line.startswith("+"):
            held.add(line[1:])
        elif line.startswith("-"):
            held.discard(line[1:])
    for container_id in sorted(held):
        # gone already, or the engine is down: the next cleanup() sees what is left
        with contextlib.suppress(Exception):
            client.containers.get(container_id).kill()


if __name__ == "__main__":
    keep_until_eof()
