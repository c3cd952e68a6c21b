"""Find processes from the outside by a variable in their environment: how a backend's cleanup finds what a sandbox
started, in this process or in one that died (the kernel shows the environment a process was started with)."""

from __future__ import annotations

import os


def with_env(name: str) -> dict[int, str]:
    """Every process on this machine whose environment sets `name`, with its value; unreadable ones are skipped."""
    needle = f"{name}=".encode()
    found: dict[int, str] = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as f:
                values = [v for v in f.read().split(b"\0") if v.startswith(needle)]
        except OSError:
            continue
        if values:
            found[int(entry.name)] = values[0][len(needle) :].decode(errors="replace")
    return found


def parent_of(pid: int) -> int | None:
    """The parent's pid, or None when the process is gone or cannot be read."""
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            return int(f.read().rsplit(b")", 1)[1].split()[1])
    except (OSError, ValueError, IndexError):
        return None
