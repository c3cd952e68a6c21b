"""The end of a run accounts for its compute: training, start-up, validation, and what went to trials off the line
that led to the best checkpoint (branches that lost, failures)."""

from __future__ import annotations

import pytest

from agent.core.records import Proposal, TrialRecord
from agent.loop.ending import compute_account


def _trial(
    index: int, parent: str | None, wall: float, train: float, status: str = "succeeded"
) -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{index:02d}",
        index=index,
        proposal=Proposal(hypothesis="h", recipe="sft", init_from=parent),
        status=status,  # type: ignore[arg-type]
        duration_s=wall - 2.0,
        validation_s=2.0,
        train_metrics={"train_seconds": train, "startup_seconds": 1.0},
    )


def test_compute_off_the_best_line_is_counted_as_lost() -> None:
    trials = [
        _trial(1, None, 20.0, 16.0),
        _trial(2, "t01", 20.0, 16.0),  # a probe that lost
        _trial(3, "t01", 20.0, 16.0),
        _trial(4, None, 10.0, 0.0, status="failed"),
        _trial(5, "t03", 30.0, 26.0),
    ]
    account = compute_account(trials, "t05")
    assert account["total_s"] == 100.0 and account["train_s"] == 74.0 and account["validation_s"] == 10.0
    assert account["lost_s"] == 30.0 and account["lost_share"] == pytest.approx(0.3)
    assert account["startup_share"] == pytest.approx(0.05)
    nothing = compute_account(trials, None)  # no best checkpoint: every trial's compute went nowhere
    assert nothing["lost_share"] == 1.0
    assert compute_account([], None)["total_s"] == 0.0
