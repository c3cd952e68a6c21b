"""The end of a run, the research loop's and an external agent's alike: the grader's final numbers, the results.csv
row, summary.json, the score plot, the MLflow parent closed, and the summary a person reads.

A run's numbers come from the grader's finalize, never from files in the workspace: its `reported` figures, by the
one score rule (`grader.figures`), read by `agent.results.rows.final_figures`; the row is `agent.results.rows.result_row`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import httpx

from agent.core import TrialRecord
from agent.results.flags import flagged_report
from agent.results.plots import plot_scores
from agent.results.rows import ResultRow, append_result_row, result_row
from agent.run import GraderError, Reporter, RunConfig, RunPaths
from agent.status import checkpoint_text, run_headline
from agent.tracking import Tracker
from sandbox import untrusted
from tasks.atomic import atomic_write_json

FINISH_RESERVE_S = 20.0  # seconds of a run's time budget kept back for the final grading and bookkeeping


def read_final(reporter: Reporter, finalize: Callable[[], dict[str, Any]]) -> dict[str, Any]:
    """What `finalize` reads from the grader, or {} (with a warning) when the grader cannot answer."""
    try:
        return finalize()
    except (GraderError, OSError, httpx.HTTPError) as exc:
        reporter.warn(f"could not read final results from the grader: {exc}")
        return {}


def write_ending(
    paths: RunPaths,
    row: ResultRow,
    *,
    status: str,
    reason: str,
    scores: list[float] | None = None,
    public_baseline: float | None = None,
    extra: Mapping[str, Any] | None = None,
    live: Mapping[str, Any] | None = None,
) -> tuple[dict[str, Any], Path | None]:
    """Append the results row, draw the score plot (public scores, against the public baseline) and write
    summary.json: the row plus `status`, `stop_reason`, `extra` and the `headline` in words (`agent.status.headline`;
    `live`: the loop's state, whose best trial it names). Returns the summary and the plot."""
    append_result_row(paths.home / "results.csv", row)
    plot = plot_scores(paths.plot_png, scores or [], public_baseline, paths.run_id)
    summary = {**row.model_dump(), "status": status, "stop_reason": reason, **(extra or {})}
    summary["headline"] = run_headline(live or {}, summary).text
    atomic_write_json(paths.summary_json, summary)
    return summary, plot


def close_tracking(
    tracker: Tracker,
    parent: str,
    row: ResultRow,
    paths: RunPaths,
    plot: Path | None,
    *,
    status: str,
    reason: str,
) -> None:
    """The MLflow parent's final metrics, plot, summary and tags; then it is ended with the run's success."""
    metrics = {"final_submission_count": float(row.submissions)}
    if row.best_score is not None:
        metrics["final_best_score"] = float(row.best_score)
    if row.improvement is not None:
        metrics["final_improvement"] = float(row.improvement)
    if row.scored_on == "private":  # the reported figures are the private half's: named so in the review view
        if row.best_score is not None:
            metrics["private_best_score"] = float(row.best_score)
        if row.baseline is not None:
            metrics["private_baseline_score"] = float(row.baseline)
    tracker.log_metrics(parent, metrics, step=row.submissions)
    if plot:
        tracker.log_artifact(parent, plot)
    tracker.log_artifact(parent, paths.summary_json)
    tags = {"rlloop.status": status, "rlloop.stop_reason": reason}
    if row.scored_on:
        tags["rlloop.scored_on"] = row.scored_on  # the half final_best_score and final_improvement are on
    if row.isolation:
        tags["rlloop.isolation"] = row.isolation
    tracker.set_tags(parent, tags)
    tracker.finish(parent, row.success)


def best_checkpoint(
    paths: RunPaths, trials: Sequence[TrialRecord], best_trial_id: str | None, final: Mapping[str, Any]
) -> dict[str, Any] | None:
    """Where the run's best checkpoint is, checked against the digest of the files the grader scored
    (`best_files_sha256`): `verified` is False, and the reason given, when the folder is not what was graded."""
    trial = next((t for t in trials if t.trial_id == best_trial_id and t.checkpoint), None)
    if trial is None or trial.checkpoint is None:
        return None
    graded = final.get("best_files_sha256") or trial.grading.get("files_sha256")
    found: dict[str, Any] = {"trial_id": best_trial_id, "path": str(paths.checkpoint(trial.checkpoint))}
    try:
        found["sha256"] = untrusted.tree_digest(paths.run_dir, trial.checkpoint)
    except OSError as exc:
        return {**found, "verified": False, "problem": f"cannot be read safely: {exc}"}
    found["verified"] = graded is not None and found["sha256"] == graded
    if not found["verified"]:
        found["problem"] = (
            "no digest from the grader" if graded is None else "differs from what the grader scored"
        )
    return found


def submission_summary(trials: Sequence[TrialRecord], policy: str) -> dict[str, Any]:
    """summary.json's account of the submission policy: trials trained, how many went to the grader, and why each
    checkpoint that was kept back was kept back."""
    trained = [t for t in trials if t.status == "succeeded"]
    kept = [t for t in trained if t.score is None and t.submission_id is None]
    return {
        "submit_policy": policy,
        "trials_trained": len(trained),
        "trials_submitted": len(trained) - len(kept),
        "not_submitted": [
            {"trial_id": t.trial_id, "valid_score": t.valid_score, "note": t.submission_note} for t in kept
        ],
    }


def interrupted_before_start(config: RunConfig, paths: RunPaths, reason: str) -> dict[str, Any]:
    """Interrupted before the loop began (building the model, starting up): still one results row (no sandbox was
    opened yet, so no isolation to report)."""
    return ended_early(config, paths, status="interrupted", reason=reason)


def error_line(exc: BaseException) -> str:
    """What broke, in one line: the exception's type and the first line of its message."""
    text = str(exc).strip().splitlines()
    return f"{type(exc).__name__}: {text[0]}"[:500] if text else type(exc).__name__


def ended_early(
    config: RunConfig, paths: RunPaths, *, status: str, reason: str, isolation: str | None = None
) -> dict[str, Any]:
    """A run that ended before its loop's finish (interrupted before it began, or failed on an error): its results
    row (success false, the reason as `error`, the sandbox's `isolation` once one was opened) and summary.json, so
    every run that stopped says how."""
    row = result_row(config, paths, success=False, isolation=isolation, error=reason)
    summary, _ = write_ending(paths, row, status=status, reason=reason, extra={"error": reason})
    return summary


def _num(value: float | None) -> str:
    return "" if value is None else f"{value:.3f}"


def _valid_text(summary: Mapping[str, Any]) -> str:
    if summary.get("score") is None:
        return ""
    low, high = summary.get("ci_low"), summary.get("ci_high")  # the 95% CI as its half-width: one short cell
    return f"{summary['score']:.3f}" + (
        f"±{(high - low) / 2:.3f}" if low is not None and high is not None else ""
    )


def _seconds_text(trial: dict[str, Any]) -> str:
    """A trial's wall seconds (training, validation and the rest), with its training seconds beside them."""
    wall = trial.get("wall_s")
    if wall is None:
        wall = float(trial.get("duration_s") or 0.0) + float(trial.get("validation_s") or 0.0)
    train = (trial.get("train_metrics") or {}).get("train_seconds")
    return f"{wall:.0f}" + (f" ({train:.0f} train)" if isinstance(train, int | float) else "")


def print_summary(reporter: Reporter, values: Mapping[str, Any], summary: Mapping[str, Any]) -> None:
    """The end-of-run table of trials, the flagged submissions, and the verdict against the baseline."""
    from rich.table import Table

    table = Table(title=f"run {values.get('run_id', '')}: {summary.get('stop_reason', '')}")
    for column in ("trial", "recipe", "from", "op", "status", "valid ±95%", "public half", "wall s"):
        table.add_column(column, no_wrap=column in ("valid ±95%", "public half"))
    base = values.get("baseline_valid") or {}
    if base:
        table.add_row("base", "", "", "", "", _valid_text(base), _num(values.get("baseline_score")), "")
    for t in values.get("trials", []):
        kept_back = t.get("status") == "succeeded" and t.get("score") is None
        table.add_row(
            t["trial_id"],
            t["proposal"]["recipe"],
            t["proposal"].get("init_from") or "base",
            t["proposal"].get("operator") or "",
            t["status"],
            _valid_text(
                {
                    "score": t.get("valid_score"),
                    "ci_low": t.get("valid_ci_low"),
                    "ci_high": t.get("valid_ci_high"),
                }
            ),
            "kept back" if kept_back else _num(t.get("score")),
            _seconds_text(t),
        )
    reporter.console.print(table)
    for line in flagged_report(values.get("trials", [])):
        reporter.warn(line)
    trained = sum(1 for t in values.get("trials", []) if t.get("status") == "succeeded")
    headline = run_headline(values, summary)
    reporter.info(f"[bold]{headline.text}[/bold]")
    if trained:
        reporter.info(f"{values.get('submissions', 0)} of {trained} trained checkpoints went to the grader")
    compute = summary.get("compute") or {}
    if compute.get("total_s"):
        reporter.info(
            f"trial compute {compute['total_s']:.0f} s: training {compute['train_share']:.0%}, start-up "
            f"{compute['startup_share']:.0%}, validation {compute['validation_share']:.0%}; off the best "
            f"checkpoint's line (branches that lost, failures) {compute['lost_share']:.0%}"
        )
    found = summary.get("best_checkpoint") or {}
    if found.get("verified"):
        reporter.info(
            f"{checkpoint_text(headline)} (the files the grader scored, sha256 {found['sha256'][:12]})"
        )
    reporter.info(
        f"results: {summary.get('workspace', '')} | plot: score_over_submissions.png | `rlloop ui` for MLflow"
    )
