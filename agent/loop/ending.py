"""The end of a research run: the grader's final numbers (never workspace files), the results.csv row, summary.json,
the plot and the MLflow parent run's close, and the best checkpoint, checked before it is reported. The pieces a run
of any kind shares are `agent.results.finish`; this is how the loop's nodes (`finish`) and its driver (an interrupted
run) put them together."""

from __future__ import annotations

from typing import Any

from agent.core import TrialRecord
from agent.loop.graph import LoopState
from agent.loop.resources import RunResources
from agent.results import (
    best_checkpoint,
    close_tracking,
    final_figures,
    read_final,
    result_row,
    submission_summary,
    write_ending,
)

# what a run's headline reads of the loop's state (agent.status.run_headline)
HEADLINE_FIELDS = {"baseline_score", "best_score", "best_trial_id", "submissions"}


def trial_compute(trials: list[TrialRecord]) -> tuple[float, float]:
    """(wall seconds, training seconds) over a run's trials: what the run spent, and how much of it trained."""
    return sum(t.wall_s for t in trials), sum(t.train_s or 0.0 for t in trials)


def compute_account(trials: list[TrialRecord], best_trial_id: str | None) -> dict[str, float]:
    """Where a run's trial compute went (wall seconds, and each part's share of them): training, start-up (imports,
    loading), validation, and the trials off the line that led to the best checkpoint (branches that lost,
    failures). What looking cost, next to what training had."""
    by_id = {t.trial_id: t for t in trials}
    kept: set[str] = set()
    current = by_id.get(best_trial_id or "")
    while current is not None and current.trial_id not in kept:
        kept.add(current.trial_id)
        current = by_id.get(current.proposal.init_from or "")
    total = sum(t.wall_s for t in trials)
    parts = {
        "train_s": sum(t.train_s or 0.0 for t in trials),
        "startup_s": sum(float(t.train_metrics.get("startup_seconds") or 0.0) for t in trials),
        "validation_s": sum(t.validation_s for t in trials),
        "lost_s": sum(t.wall_s for t in trials if t.trial_id not in kept),
    }
    account = {"total_s": round(total, 1), **{k: round(v, 1) for k, v in parts.items()}}
    for key, seconds in parts.items():
        account[key.replace("_s", "_share")] = round(seconds / total, 3) if total else 0.0
    return account


def finalize(
    run: RunResources, state: LoopState, *, success: bool, status: str, reason: str
) -> dict[str, Any]:
    """Read final results from the grader (never from workspace files), write results.csv, plot, MLflow."""
    final = read_final(run.reporter, lambda: run.final_results(status))
    figures = final_figures(
        final,
        baseline=state.baseline_score,
        best=state.best_score,
        submissions=state.submissions,
    )
    row = result_row(
        run.config,
        run.paths,
        success=success,
        figures=figures,
        duration_s=round(run.used_s(state), 1),
        isolation=run.isolation,
        error=reason,
        compute=trial_compute(state.trials),
    )
    summary, plot = write_ending(
        run.paths,
        row,
        status=status,
        reason=reason,
        scores=state.scores,
        public_baseline=state.baseline_score,
        extra={
            "grader": final,
            "best_checkpoint": verified_best(run, state, final),
            **submission_summary(state.trials, run.config.submit),
            "compute": compute_account(state.trials, state.best_trial_id),
        },
        live=state.model_dump(include=HEADLINE_FIELDS),
    )
    parent = state.mlflow_parent
    if parent:
        close_tracking(run.tracker, parent, row, run.paths, plot, status=status, reason=reason)
    return summary


def verified_best(run: RunResources, state: LoopState, final: dict[str, Any]) -> dict[str, Any] | None:
    """The best trial's checkpoint, checked against what the grader scored before it is reported."""
    found = best_checkpoint(run.paths, state.trials, state.best_trial_id, final)
    if found is not None and not found["verified"]:
        run.reporter.error(
            f"the best checkpoint ({found['trial_id']}, {found['path']}) is not reported as the run's model: "
            f"{found['problem']}"
        )
    return found
