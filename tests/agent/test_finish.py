"""The one rule for a run's reported numbers, and the one results row both run paths write."""

from __future__ import annotations

from agent.finish import final_figures
from agent.results import RESULTS_COLUMNS, ResultRow


def test_private_scores_win_when_the_run_splits_its_test_set() -> None:
    final = {
        "baseline_score": 0.2,
        "best_score": 0.5,
        "baseline_private_score": 0.25,
        "final_private_score": 0.4,
        "total_submissions": 3,
    }
    figures = final_figures(final, baseline=0.1, best=0.9, submissions=7)
    assert figures["baseline"] == 0.25 and figures["best_score"] == 0.4 and figures["submissions"] == 3
    assert abs(figures["improvement"] - 0.15) < 1e-9


def test_public_then_the_loops_own_figures_fill_in() -> None:
    public = final_figures({"baseline_score": 0.2, "best_score": 0.3, "final_private_score": None})
    assert (public["baseline"], public["best_score"]) == (0.2, 0.3)
    unread = final_figures({}, baseline=0.1, best=None, submissions=2)
    assert unread == {"baseline": 0.1, "best_score": None, "improvement": None, "submissions": 2}


def test_the_row_is_the_csv_columns_with_four_decimal_scores() -> None:
    assert RESULTS_COLUMNS[0] == "run_id" and RESULTS_COLUMNS[-1] == "error" and len(RESULTS_COLUMNS) == 15
    row = ResultRow(
        run_id="r", task="arith", agent="a", base_model="m", baseline=0.2, success=True, workspace="/w"
    )
    dumped = row.model_dump()
    assert list(dumped) == RESULTS_COLUMNS
    assert dumped["baseline"] == "0.2000" and dumped["best_score"] == "" and dumped["driver_model"] == ""
