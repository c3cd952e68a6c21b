"""The one rule for a run's reported numbers, and the one results row both run paths write."""

from __future__ import annotations

from pathlib import Path

from agent.run.config import RunConfig
from agent.run.finish import ended_early
from agent.run.results import (
    RESULTS_COLUMNS,
    ResultRow,
    final_figures,
    read_results,
    result_row,
    summary_figures,
)
from agent.run.workspace import RunPaths


def test_the_rows_figures_are_the_graders_reported_ones() -> None:
    final = {
        "baseline_score": 0.2,
        "best_score": 0.5,
        "baseline_private_score": 0.25,
        "final_private_score": 0.4,
        "total_submissions": 3,
        "reported": {"scored_on": "private", "baseline": 0.25, "best": 0.4, "improvement": 0.15},
    }
    figures = final_figures(final, baseline=0.1, best=0.9, submissions=7)
    assert figures == {"baseline": 0.25, "best_score": 0.4, "improvement": 0.15, "submissions": 3}


def test_no_best_submission_is_the_baseline_never_a_mix_of_parts() -> None:
    """The grader's answer for a split run where nothing unflagged was scored: the private baseline twice, never
    the public best against the private baseline."""
    final = {
        "baseline_score": 0.2,
        "best_score": 0.2,
        "baseline_private_score": 0.25,
        "final_private_score": 0.25,
        "reported": {"scored_on": "private", "baseline": 0.25, "best": 0.25, "improvement": 0.0},
    }
    assert final_figures(final) == {
        "baseline": 0.25,
        "best_score": 0.25,
        "improvement": 0.0,
        "submissions": 0,
    }


def test_the_loops_own_figures_follow_the_same_rule_when_the_grader_gave_none() -> None:
    unread = final_figures({}, baseline=0.1, best=None, submissions=2)
    assert unread == {"baseline": 0.1, "best_score": 0.1, "improvement": 0.0, "submissions": 2}
    counted = final_figures({"total_submissions": 4}, baseline=0.1, best=0.3)
    assert counted["submissions"] == 4 and abs(counted["improvement"] - 0.2) < 1e-9
    assert final_figures({}) == {"baseline": None, "best_score": None, "improvement": None, "submissions": 0}


def test_a_summary_without_reported_figures_gives_its_rows() -> None:
    """summary.json of a run from before the grader reported its figures: the row's own (four-decimal) numbers."""
    summary = {"baseline": "0.2500", "best_score": "", "submissions": 1, "grader": {"baseline_score": 0.2}}
    assert summary_figures(summary) == {
        "baseline": 0.25,
        "best_score": 0.25,
        "improvement": 0.0,
        "submissions": 1,
    }


def test_one_builder_names_the_agent_and_keeps_isolation(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    builtin = RunConfig(home=tmp_path, agent_name="mine")
    assert result_row(builtin, paths, success=True).agent == "mine"
    llm = RunConfig(home=tmp_path, proposer="llm", driver_model="gpt-x")
    row = result_row(llm, paths, success=False, isolation="namespaces", error="boom")
    assert (row.agent, row.driver_model, row.isolation, row.error) == (
        "rlloop-llm",
        "gpt-x",
        "namespaces",
        "boom",
    )
    external = result_row(llm, paths, success=True, external="Example Agent", error="ignored")
    assert (external.agent, external.driver_model, external.error) == ("Example Agent", "", "")
    # a run that failed early: the same agent rule and the sandbox's isolation as any other row
    summary = ended_early(llm, paths, status="failed", reason="boom", isolation="container")
    assert summary["agent"] == "rlloop-llm" and summary["isolation"] == "container"
    (written,) = read_results(tmp_path / "results.csv")
    assert (
        written["agent"] == "rlloop-llm"
        and written["isolation"] == "container"
        and written["error"] == "boom"
    )


def test_the_row_is_the_csv_columns_with_four_decimal_scores() -> None:
    assert RESULTS_COLUMNS[0] == "run_id" and RESULTS_COLUMNS[-1] == "error" and len(RESULTS_COLUMNS) == 19
    row = ResultRow(
        run_id="r", task="arith", agent="a", base_model="m", baseline=0.2, success=True, workspace="/w"
    )
    dumped = row.model_dump()
    assert list(dumped) == RESULTS_COLUMNS
    assert dumped["baseline"] == "0.2000" and dumped["best_score"] == "" and dumped["driver_model"] == ""
