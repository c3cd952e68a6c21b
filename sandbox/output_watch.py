"""Watch how much a command writes under its workspace, for backends that cannot cap disk use outright.

The workspace already holds data and earlier trials, so the limit is on growth since the command started.
"""

from __future__ import annotations

import os
from pathlib import Path


def disk_usage(root: Path) -> int:
    """Bytes allocated under `root` (blocks, so sparse files count for what they really use); never follows links."""
    total = 0
    stack = [str(root)]
    while stack:
        folder = stack.pop()
        try:
            with os.scandir(folder) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    total += st.st_blocks * 512
                    if entry.is_dir(follow_symlinks=False):
                        stack.append(entry.path)
        except OSError:
            continue
    return total


class OutputWatch:
    """Says when the workspace has grown past `max_mb` since this watch was made."""

    def __init__(self, root: Path, max_mb: int | None) -> None:
        self.root = root
        self.max_bytes = None if max_mb is None else max_mb * 1024 * 1024
        self.start = disk_usage(root) if self.max_bytes is not None else 0
        self.peak_growth = 0

    def exceeded(self) -> bool:
        if self.max_bytes is None:
            return False
        growth = disk_usage(self.root) - self.start
        self.peak_growth = max(self.peak_growth, growth)
        return growth > self.max_bytes
