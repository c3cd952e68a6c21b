"""The live progress table of a sweep: one row per run, with the loop's own numbers for the runs in flight."""

from __future__ import annotations

import time
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from agent.status import read_state
from agent.sweeps.manifest import Entry, Manifest

STYLE = {"finished": "green", "failed": "red", "running": "cyan", "interrupted": "yellow", "pending": "dim"}


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def live_numbers(home: Path, entry: Entry) -> tuple[float | None, float | None, int, int]:
    """(baseline, best, submissions, trials) of a run, read from its checkpoint while it runs."""
    if entry.status != "running":
        return entry.baseline, entry.best, entry.submissions, -1
    state = read_state(home / "runs" / entry.run_id)
    return (
        state.get("baseline_score"),
        state.get("best_score"),
        int(state.get("submissions") or 0),
        len(state.get("trials") or []),
    )


def sweep_table(home: Path, manifest: Manifest) -> Table:
    counts: dict[str, int] = {}
    for entry in manifest.entries.values():
        counts[entry.status] = counts.get(entry.status, 0) + 1
    caption = ", ".join(f"{n} {status}" for status, n in sorted(counts.items())) + (
        "; baseline and best: a running run's on the public half so far, a finished run's as results.csv reports "
        "them (the private half when the test set is split)"
    )
    table = Table(title=f"sweep {manifest.sweep_id}", caption=caption)
    for column in (
        "benchmark",
        "base model",
        "agent",
        "seed",
        "status",
        "trials",
        "baseline",
        "best",
        "subs",
        "time",
    ):
        table.add_column(column)
    now = time.time()
    for entry in manifest.entries.values():
        c = entry.combination
        baseline, best, submissions, trials = live_numbers(home, entry)
        elapsed = ""
        if entry.started_at:
            elapsed = f"{(entry.finished_at or now) - entry.started_at:.0f}s"
        status: str = entry.status
        style = STYLE.get(entry.status, "")
        if entry.agent_error:  # the run finished, its agent did not: say so, not "finished"
            status, style = f"agent failed: {entry.agent_error[:70]}", "red"
        elif entry.error:
            status = f"{entry.status}: {entry.error[:40]}"
        table.add_row(
            c.benchmark,
            Path(c.base_model).name,
            c.agent_label,
            str(c.seed),
            f"[{style}]{escape(status)}[/]",
            "" if trials < 0 else str(trials),
            _fmt(baseline) + (" (public)" if trials >= 0 and baseline is not None else ""),
            _fmt(best) + (" (public)" if trials >= 0 and best is not None else ""),
            str(submissions),
            elapsed,
        )
    return table
