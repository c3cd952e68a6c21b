"""What is still running on this machine, read from /proc and the Docker engine: a command's process tree, and
everything left of a research run (processes that mention its id or workspace, containers carrying its label)."""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path


def _stat(pid: int) -> list[bytes] | None:
    """The fields of /proc/PID/stat after the command name: state, ppid, pgid, ..."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return f.read().rsplit(b")", 1)[1].split()
    except (OSError, IndexError):
        return None


def alive(pid: int) -> bool:
    """Running (a zombie waiting for its parent does not count)."""
    fields = _stat(pid)
    return fields is not None and fields[0] != b"Z"


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def descendants(root: int) -> set[int]:
    """Every live process below `root` (children, their children, ...), and those in its process group."""
    parents: dict[int, int] = {}
    groups: dict[int, int] = {}
    for pid in _pids():
        fields = _stat(pid)
        if fields is not None and fields[0] != b"Z":
            parents[pid], groups[pid] = int(fields[1]), int(fields[2])
    found = {pid for pid, group in groups.items() if group == root and pid != root}
    frontier = [root, *found]
    while frontier:
        parent = frontier.pop()
        for pid, ppid in parents.items():
            if ppid == parent and pid not in found and pid != root:
                found.add(pid)
                frontier.append(pid)
    return found


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return "?"


def still_alive(pids: Iterable[int], within_s: float = 5.0) -> dict[int, str]:
    """Those of `pids` still running after up to `within_s` seconds (waits while any is), with their cmdlines."""
    pids = set(pids)
    deadline = time.monotonic() + within_s
    while True:
        left = {pid for pid in pids if alive(pid)}
        if not left or time.monotonic() >= deadline:
            return {pid: cmdline(pid) for pid in left}
        time.sleep(0.1)


def run_processes(run_id: str, workspace: Path, exclude: Iterable[int] = ()) -> dict[int, str]:
    """Live processes (but this one and `exclude`) whose cmdline or environment mention the run's workspace (trials,
    the grader: its config lies beside it), or its id as an argument (`rlloop run --run-id ID`, `resume ID`) with
    the run's home in their cmdline or environment (another test's run of the same id, on another worker of the
    suite, is not this one)."""
    skip = {os.getpid(), *exclude}
    needles = (str(workspace).encode(), str(workspace.parent).encode())
    home = str(workspace.parent.parent.parent).encode()  # RLLOOP_HOME/runs/<id>/workspace
    found: dict[int, str] = {}
    for pid in _pids():
        if pid in skip or not alive(pid):
            continue
        try:
            args = Path(f"/proc/{pid}/cmdline").read_bytes()
        except OSError:
            continue
        try:
            environ = Path(f"/proc/{pid}/environ").read_bytes()
        except OSError:
            environ = b""
        words = args.split(b"\0")
        mine = any(n in args or n in environ for n in needles)
        if mine or (run_id.encode() in words and (home in args or home in environ)):
            found[pid] = cmdline(pid)
    return found


def run_containers(run_id: str, *, running_only: bool = False) -> list[str]:
    """This run's containers ("name status" each; exited ones too unless `running_only`); empty without Docker."""
    if shutil.which("docker") is None:
        return []
    filters = ["--filter", f"label=rlloop.run={run_id}"] + (
        ["--filter", "status=running"] if running_only else []
    )
    listed = subprocess.run(
        ["docker", "ps", "-a", *filters, "--format", "{{.Names}} {{.Status}}"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return [line for line in listed.stdout.splitlines() if line.strip()]


def running_containers(run_id: str, within_s: float = 5.0) -> list[str]:
    """This run's containers still running after up to `within_s` seconds."""
    deadline = time.monotonic() + within_s
    while True:
        running = run_containers(run_id, running_only=True)
        if not running or time.monotonic() >= deadline:
            return running
        time.sleep(0.2)
