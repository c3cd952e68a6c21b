"""Reading a JSON Lines file line by line, with the line numbers a message about a bad line needs.

Lives in the bottom package so that a benchmark's own data (tasks.gsm8k) and a trial's workspace files
(trainers.data) are read the same way, each raising its own error with its own advice.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


def json_lines(
    path: Path, not_json: Callable[[int, json.JSONDecodeError], Exception]
) -> Iterator[tuple[int, Any]]:
    """(line number from 1, parsed value) of each non-blank line of a UTF-8 file; a line that is not JSON raises
    `not_json(number, error)`, the caller's error for it."""
    with path.open(encoding="utf-8") as handle:
        for number, line in enumerate(handle, start=1):
            if not line.strip():
                continue
            try:
                value = json.loads(line)
            except json.JSONDecodeError as exc:
                raise not_json(number, exc) from None
            yield number, value
