"""Shared helpers for sandbox tests: a workspace per test and a way to tell whether a pid is still running."""

from __future__ import annotations

import os
import uuid
from pathlib import Path

import pytest


@pytest.fixture()
def workspace(tmp_path: Path) -> Path:
    ws = tmp_path / "workspace"
    ws.mkdir()
    return ws


def alive(pid: int) -> bool:
    """Running (zombies waiting for their parent to reap them do not count)."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()[0] != b"Z"
    except (OSError, IndexError):
        return False


def read_pids(path: Path) -> list[int]:
    return [int(p) for p in path.read_text().split()] if path.exists() else []


def running_with(token: str) -> list[int]:
    """Host pids of live processes whose command line holds `token`. A pid a command writes from inside the
    sandbox's own PID namespace means nothing out here; a unique argument on its command line does."""
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if token.encode() in argv and alive(int(entry.name)):
            found.append(int(entry.name))
    return found


@pytest.fixture()
def token() -> str:
    """A unique argument to find a test's processes by."""
    return f"rlloop-test-{uuid.uuid4().hex}"


@pytest.fixture()
def secret_env(monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("RLLOOP_TEST_SECRET_API_KEY", "sk-do-not-leak")
    return "sk-do-not-leak"


# A command that daemonizes a grandchild (double fork + setsid) which records its pid and sleeps, then sleeps
# argv[1] seconds. An argv[2] (a `token`) is there to find all three processes from the host.
DOUBLE_FORK = r"""
import os, sys, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        open("grandchild.pid", "w").write(str(os.getpid()))
        time.sleep(300)
    os._exit(0)
time.sleep(float(sys.argv[1]))
"""

__all__ = ["alive", "read_pids", "running_with", "DOUBLE_FORK", "os"]
