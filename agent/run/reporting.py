"""What people see: live console lines, a log file readable after a crash, the score plot (results.csv: `results`)."""

from __future__ import annotations

import io
import logging
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from rich.console import Console

from tasks.atomic import atomic_write_bytes


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


def submission_flags(grading: dict[str, Any]) -> str:
    """The mark after a submission's console line: the grader's integrity flags with their evidence, or a copy."""
    from rich.markup import escape

    flags = grading.get("flags") or []
    if flags:
        text = "; ".join(f"{f.get('check')}: {f.get('evidence')}" for f in flags)
        return f" [red]FLAGGED ({escape(text)}); never the best[/red]"
    return " [yellow](copy of the base model)[/yellow]" if grading.get("is_copy") else ""


def flagged_report(trials: list[dict[str, Any]]) -> list[str]:
    """One line per trial whose submission the grader flagged, for the end-of-run summary."""
    from rich.markup import escape

    lines = []
    for trial in trials:
        flags = (trial.get("grading") or {}).get("flags") or []
        if flags:
            text = "; ".join(f"{f.get('check')}: {f.get('evidence')}" for f in flags)
            lines.append(
                f"{trial.get('trial_id')} was flagged by the grader and never counted as best: {escape(text)}"
            )
    return lines


def plot_scores(path: Path, scores: list[float], baseline: float | None, title: str) -> Path | None:
    """Score over submissions, with the baseline and the best so far: the picture a reviewer wants."""
    if not scores:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    steps = list(range(1, len(scores) + 1))
    best = [max(scores[: i + 1]) for i in range(len(scores))]
    ax.plot(steps, scores, "o-", label="submission score")
    ax.step(steps, best, where="post", linestyle="--", label="best so far")
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"baseline {baseline:.3f}")
    ax.set_xlabel("submission")
    ax.set_ylabel("score")
    ax.set_xticks(steps)
    ax.set_title(title)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Write a matplotlib figure as PNG, atomically (an open UI never shows half an image), and free it."""
    import matplotlib.pyplot as plt

    image = io.BytesIO()
    fig.savefig(image, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, image.getvalue())
