"""The process table as Linux shows it in /proc: the one reader for every package that looks at processes from the
outside (a run's children, the sandbox's jails and cleanups, the service's workers, model-written programs).

One rule for a process that is gone (`ProcStat.gone`, `alive`): /proc no longer shows it, or it is a zombie (`Z`)
or dead (`X`), having run to its end with only its exit status left for its parent. Every reader returns an empty
answer (None, nothing found) for a process it cannot read: it went away, or it is not ours to read.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

PROC = Path("/proc")
GONE_STATES = ("Z", "X")


@dataclass(frozen=True)
class ProcStat:
    """The fields of /proc/PID/stat that rlloop uses."""

    pid: int
    state: str  # R, S, D, T, Z, X...
    ppid: int
    pgid: int
    start: str  # start time in clock ticks after boot: with the pid, it names one process (pids are reused)

    @property
    def gone(self) -> bool:
        return self.state in GONE_STATES


def available() -> bool:
    """Whether this machine has a /proc to read (Linux)."""
    return (PROC / "self" / "stat").exists()


def pids() -> list[int]:
    """Every process id /proc lists now (empty without /proc)."""
    try:
        return [int(entry.name) for entry in os.scandir(PROC) if entry.name.isdigit()]
    except OSError:
        return []


def _read(pid: int, name: str) -> bytes | None:
    try:
        return (PROC / str(pid) / name).read_bytes()
    except OSError:
        return None


def stat(pid: int) -> ProcStat | None:
    """The process's stat line, or None when it cannot be read."""
    raw = _read(pid, "stat")
    if raw is None:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after its last closing parenthesis
    fields = raw.rsplit(b")", 1)[-1].split()
    try:
        return ProcStat(pid, fields[0].decode(), int(fields[1]), int(fields[2]), fields[19].decode())
    except (IndexError, ValueError):
        return None


def table() -> dict[int, ProcStat]:
    """Every readable process: pid -> its stat."""
    found = {pid: stat(pid) for pid in pids()}
    return {pid: s for pid, s in found.items() if s is not None}


def alive(pid: int) -> bool:
    """Running: /proc shows it, and it is not a zombie or dead."""
    found = stat(pid)
    return found is not None and not found.gone


def start_time(pid: int) -> str | None:
    """When the process started (`ProcStat.start`), or None when it is gone."""
    found = stat(pid)
    return found.start if found is not None else None


def parent_of(pid: int) -> int | None:
    """The parent's pid, or None when the process is gone or cannot be read."""
    found = stat(pid)
    return found.ppid if found is not None else None


def same_process_alive(pid: int | None, start: str | None) -> bool:
    """True when `pid` still runs and is the very process recorded with start time `start` (None: any process with
    that pid), not a later one that reused the pid. Without /proc, the signal probe alone answers."""
    if pid is None:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    found = stat(pid)
    if found is None:
        return not available()
    return not found.gone and (start is None or found.start == start)


def cmdline(pid: int) -> bytes | None:
    """The process's command line (arguments separated by NUL bytes), or None."""
    return _read(pid, "cmdline")


def environ(pid: int) -> list[bytes] | None:
    """The environment the process was started with, as `NAME=value` entries, or None when it cannot be read."""
    raw = _read(pid, "environ")
    return None if raw is None else raw.split(b"\0")


def with_env(name: str) -> dict[int, str]:
    """Every process whose environment sets `name`, with its value; unreadable ones are skipped."""
    needle = f"{name}=".encode()
    found: dict[int, str] = {}
    for pid in pids():
        values = [v for v in environ(pid) or [] if v.startswith(needle)]
        if values:
            found[pid] = values[0][len(needle) :].decode(errors="replace")
    return found


def carrying(entry: str) -> set[int]:
    """Every process whose environment holds exactly `entry` (`NAME=value`): a marker its children inherit."""
    needle = entry.encode()
    return {pid for pid in pids() if needle in (environ(pid) or [])}
