"""The grader's integrity flags in words: the mark after a submission's console line, and the end-of-run lines for
each flagged trial."""

from __future__ import annotations

from typing import Any


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
