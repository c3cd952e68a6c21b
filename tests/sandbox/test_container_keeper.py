"""The host side of a container's lifeline: one keeper per process, in a session of its own (a Ctrl-C or a group
signal meant for the run does not reach it), deaf to SIGTERM, and started again, holding every container, when it
died. What it does at its process's death: tests/sandbox/test_docker.py (a hostile trial, then a SIGKILL)."""

from __future__ import annotations

import os
import signal
import time

from sandbox.container_keeper import ContainerKeeper
from tasks import procfs


def _gone_within(pid: int, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while procfs.alive(pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not procfs.alive(pid)


def _ignores(pid: int, *signals: int) -> bool:
    """Whether the process ignores every one of `signals` (its SigIgn mask in /proc)."""
    status = (procfs.PROC / str(pid) / "status").read_text()
    mask = int(next(line.split()[1] for line in status.splitlines() if line.startswith("SigIgn:")), 16)
    return all(mask & (1 << (sig - 1)) for sig in signals)


def test_the_keeper_stands_apart_and_is_replaced_when_killed() -> None:
    keeper = ContainerKeeper()
    assert keeper.pid() is None  # nothing held, nothing started
    keeper.hold("c1")
    first = keeper.pid()
    assert first is not None and os.getsid(first) == first  # a session of its own
    deadline = time.monotonic() + 30
    while not _ignores(first, signal.SIGINT, signal.SIGTERM, signal.SIGHUP) and time.monotonic() < deadline:
        time.sleep(0.05)  # its interpreter starting
    os.kill(first, signal.SIGTERM)
    assert not _gone_within(first, 1.0), "the keeper must outlast a SIGTERM meant for its run"
    os.kill(first, signal.SIGKILL)
    assert _gone_within(first, 5.0)
    keeper.hold("c2")  # a trial must not start without its lifeline: a new keeper, told of c1 and c2
    second = keeper.pid()
    assert second is not None and second != first
    keeper.release("c1")
    keeper.release("c2")
    assert keeper._proc is not None and keeper._proc.stdin is not None
    keeper._proc.stdin.close()  # what our death does: EOF, and the keeper ends (nothing left to kill)
    assert keeper._proc.wait(timeout=30) == 0
