"""Write a command's output to its log file as it arrives, up to a byte cap, and keep its last lines.

Both backends feed chunks of bytes into a `CappedLog`; past the cap the rest is counted and dropped (the command
is not stopped for talking too much), and a marker line in the log says so. The tail is kept from everything the
command printed, truncated or not, so the final error is visible even when the log file was cut.
"""

from __future__ import annotations

import threading
from collections import deque
from pathlib import Path
from typing import IO

TAIL_LINES = 40
_TAIL_BYTES = 64 * 1024


class CappedLog:
    """An append-only log file with a byte cap and an in-memory tail."""

    def __init__(self, path: Path, max_bytes: int) -> None:
        if max_bytes < 0:
            raise ValueError(f"max_log_bytes must be >= 0, got {max_bytes}")
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        self.max_bytes = max_bytes
        self.written = 0
        self.dropped = 0
        self._file: IO[bytes] = path.open("wb")
        self._tail: deque[bytes] = deque()
        self._tail_size = 0
        self._lock = threading.Lock()

    @property
    def truncated(self) -> bool:
        return self.dropped > 0

    def write(self, chunk: bytes) -> None:
        if not chunk:
            return
        with self._lock:
            self._remember(chunk)
            room = self.max_bytes - self.written
            if room > 0:
                kept = chunk[:room]
                self._file.write(kept)
                self._file.flush()
                self.written += len(kept)
                chunk = chunk[room:]
            if chunk:
                if self.dropped == 0:
                    self._file.write(
                        f"\n[rlloop] log truncated at {self.max_bytes} bytes (max_log_bytes); "
                        "further output is discarded\n".encode()
                    )
                    self._file.flush()
                self.dropped += len(chunk)

    def note(self, line: str) -> None:
        """A line from the sandbox itself (why it stopped the command); always written, cap or not."""
        with self._lock:
            data = f"\n[rlloop] {line}\n".encode()
            self._file.write(data)
            self._file.flush()
            self._remember(data)

    def close(self) -> None:
        with self._lock:
            if self.dropped:
                self._file.write(f"[rlloop] {self.dropped} bytes of output were discarded\n".encode())
            self._file.close()

    def tail(self, lines: int = TAIL_LINES) -> str:
        with self._lock:
            text = b"".join(self._tail).decode("utf-8", errors="replace")
        return "\n".join(text.rstrip("\n").splitlines()[-lines:])

    def _remember(self, chunk: bytes) -> None:
        chunk = chunk[-_TAIL_BYTES:]
        self._tail.append(chunk)
        self._tail_size += len(chunk)
        while self._tail_size - len(self._tail[0]) >= _TAIL_BYTES:
            self._tail_size -= len(self._tail.popleft())


def pump(stream: IO[bytes], log: CappedLog, chunk_size: int = 64 * 1024) -> None:
    """Copy a pipe into the log until it closes (run in a thread)."""
    read = getattr(stream, "read1", stream.read)
    while True:
        chunk = read(chunk_size)
        if not chunk:
            break
        log.write(chunk)
