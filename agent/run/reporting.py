"""What people see while a run runs: live console lines, and a log file readable after a crash (the end of a run:
`agent.results`)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rich.console import Console


class Reporter:
    """Prints progress for a person and writes the same story, timestamped, to the run's log file."""

    def __init__(self, log_file: Path | None, quiet: bool = False) -> None:
        self.console = Console(highlight=False, quiet=quiet, soft_wrap=True)
        self.logger = logging.getLogger(f"rlloop.run.{id(self)}")
        self.logger.setLevel(logging.INFO)
        self.logger.propagate = False
        if log_file is not None:
            log_file.parent.mkdir(parents=True, exist_ok=True)
            handler = logging.FileHandler(log_file)
            handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(message)s"))
            self.logger.addHandler(handler)

    def info(self, message: str, style: str | None = None) -> None:
        self.console.print(message, style=style)
        self.logger.info(_plain(message))

    def warn(self, message: str) -> None:
        self.console.print(f"[yellow]warning:[/yellow] {message}")
        self.logger.warning(_plain(message))

    def error(self, message: str) -> None:
        self.console.print(f"[red]error:[/red] {message}")
        self.logger.error(_plain(message))

    @contextmanager
    def watching(self, label: str, log_path: Path | None = None) -> Iterator[None]:
        """A live status line (spinner, elapsed time, the newest log line) while something slow runs."""
        if not self.console.is_terminal or self.console.quiet:
            yield
            return
        stop = threading.Event()
        started = time.monotonic()
        with self.console.status(label) as status:

            def refresh() -> None:
                while not stop.wait(0.5):
                    tail = _last_line(log_path) if log_path else ""
                    status.update(f"{label} [dim]{time.monotonic() - started:4.0f}s  {tail[:90]}[/dim]")

            thread = threading.Thread(target=refresh, daemon=True)
            thread.start()
            try:
                yield
            finally:
                stop.set()
                thread.join(timeout=2)

    def close(self) -> None:
        for handler in list(self.logger.handlers):
            handler.close()
            self.logger.removeHandler(handler)


def _plain(message: str) -> str:
    from rich.text import Text

    return Text.from_markup(message).plain


def _last_line(path: Path) -> str:
    from sandbox import untrusted

    try:  # a trial's log is the host's file; read like anything of a trial's: no link, no FIFO, the tail only
        lines = [
            ln
            for ln in untrusted.tail_text(path.parent, path.name, max_bytes=2048).splitlines()
            if ln.strip()
        ]
    except OSError:
        return ""
    return lines[-1].strip() if lines else ""
