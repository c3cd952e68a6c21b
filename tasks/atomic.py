"""The one way rlloop writes a file that others read: a temp file beside it, fsync, then rename.

Readers (a resuming run, the MLflow UI, a person with `cat`) see the old content or the new, never half a file; a
crash mid-write leaves no partial file and no temp file behind. Lives in the bottom package so that the trainer
image, the grader and the agent all share it.
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import IO, Any, TextIO, cast


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write(path: str | Path, write: Callable[[IO[str]], Any], *, mode: int | None = None) -> Path:
    """Call `write(handle)` on a temp file beside `path`, then rename it over `path`. The file gets `mode`, or the
    mode a plain `open()` would give (mkstemp's 0600 would hide it from the sandbox user and from people)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8", newline="") as handle:
            write(handle)
            handle.flush()
            os.fsync(handle.fileno())
        os.chmod(tmp, mode if mode is not None else 0o666 & ~_umask())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str, *, mode: int | None = None) -> Path:
    """Write `text` to `path` atomically."""
    return atomic_write(path, lambda handle: handle.write(text), mode=mode)


def atomic_write_bytes(path: str | Path, data: bytes, *, mode: int | None = None) -> Path:
    """Write `data` (an image, an archive) atomically, through the temp file's binary buffer."""
    return atomic_write(path, lambda handle: cast(TextIO, handle).buffer.write(data), mode=mode)


def atomic_write_json(
    path: str | Path, data: Any, *, indent: int | None = 2, sort_keys: bool = False, mode: int | None = None
) -> Path:
    """Write `data` as JSON (one trailing newline) atomically; values JSON cannot hold are written as `str()`."""
    text = json.dumps(data, indent=indent, sort_keys=sort_keys, default=str) + "\n"
    return atomic_write_text(path, text, mode=mode)


def atomic_write_lines(path: str | Path, lines: Iterable[str], *, mode: int | None = None) -> Path:
    """Write `lines` (each without its newline) atomically, one per line: JSONL files, CSV rows."""

    def write(handle: IO[str]) -> None:
        for line in lines:
            handle.write(line + "\n")

    return atomic_write(path, write, mode=mode)


@contextmanager
def atomic_folder(target: str | Path) -> Iterator[Path]:
    """Fill the yielded temp folder beside `target`; when the block ends it takes `target`'s place in one rename (an
    old `target` removed first). On an error the temp folder goes and an old `target` stays as it was."""
    target = Path(target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=f".{target.name}.", dir=target.parent))
    try:
        yield staging
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
