"""The one rule for a run's reported numbers, and the one results row both run paths write."""

from __future__ import annotations

from pathlib import Path

from agent.results.finish import ended_early
from agent.results.rows import (
    RESULTS_COLUMNS,
    ResultRow,
    append_result_row,
    final_figures,
    read_results,
    result_row,
    summary_figures,
)
from agent.run.config import RunConfig
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
    # the reported pair says which half it is on, and the public pair (what the run chose by) stands beside it
    assert figures == {
        "baseline": 0.25,
        "best_score": 0.4,
        "improvement": 0.15,
        "scored_on": "private",
        "public_baseline": 0.2,
        "public_best": 0.5,
        "submissions": 3,
    }


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
        "scored_on": "private",
        "public_baseline": 0.2,
        "public_best": 0.2,
        "submissions": 0,
    }


def test_the_loops_own_figures_follow_the_same_rule_when_the_grader_gave_none() -> None:
    unread = final_figures({}, baseline=0.1, best=None, submissions=2)
    assert unread == {
        "baseline": 0.1,
        "best_score": 0.1,
        "improvement": 0.0,
        "scored_on": "public",
        "public_baseline": 0.1,
        "public_best": 0.1,
        "submissions": 2,
    }
    counted = final_figures({"total_submissions": 4}, baseline=0.1, best=0.3)
    assert counted["submissions"] == 4 and abs(counted["improvement"] - 0.2) < 1e-9
    assert final_figures({}) == {
        "baseline": None,
        "best_score": None,
        "improvement": None,
        "scored_on": "",
        "public_baseline": None,
        "public_best": None,
        "submissions": 0,
    }


def test_a_summary_without_reported_figures_gives_its_rows() -> None:
    """summary.json of a run from before the grader reported its figures: the row's own (four-decimal) numbers."""
    summary = {"baseline": "0.2500", "best_score": "", "submissions": 1, "grader": {"baseline_score": 0.2}}
    assert summary_figures(summary) == {
        "baseline": 0.25,
        "best_score": 0.25,
        "improvement": 0.0,
        "scored_on": "public",
        "public_baseline": 0.25,
        "public_best": 0.25,
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
    assert RESULTS_COLUMNS[0] == "run_id" and RESULTS_COLUMNS[-3:] == ["error", "compute_s", "train_s"]
    assert len(RESULTS_COLUMNS) == 24
    at = RESULTS_COLUMNS.index("improvement")  # which half the reported pair is on, then the public pair
    assert RESULTS_COLUMNS[at + 1 : at + 4] == ["scored_on", "public_baseline", "public_best"]
    row = ResultRow(
        run_id="r", task="arith", agent="a", base_model="m", baseline=0.2, success=True, workspace="/w"
    )
    dumped = row.model_dump()
    assert list(dumped) == RESULTS_COLUMNS
    assert dumped["baseline"] == "0.2000" and dumped["best_score"] == "" and dumped["driver_model"] == ""


def test_a_results_file_from_before_the_halves_were_named_gets_the_new_columns(tmp_path: Path) -> None:
    """An existing results.csv (no scored_on, public_baseline, public_best) is rewritten under the new header, its
    rows kept with those cells empty, and the new run's row says which half each of its numbers is on."""
    results = tmp_path / "results.csv"
    old = [c for c in RESULTS_COLUMNS if c not in ("scored_on", "public_baseline", "public_best")]
    results.write_text(",".join(old) + "\n" + ",".join("old" if c == "run_id" else "" for c in old) + "\n")
    paths = RunPaths(tmp_path, "new")
    final = {
        "baseline_score": 0.09,
        "best_score": 0.714,
        "baseline_private_score": 0.102,
        "final_private_score": 0.706,
        "total_submissions": 3,
        "reported": {"scored_on": "private", "baseline": 0.102, "best": 0.706, "improvement": 0.604},
    }
    row = result_row(RunConfig(home=tmp_path), paths, success=True, figures=final_figures(final))
    append_result_row(results, row)
    first, new = read_results(results)
    assert first["run_id"] == "old" and first["scored_on"] == ""
    assert (new["baseline"], new["best_score"], new["scored_on"]) == ("0.1020", "0.7060", "private")
    assert (new["public_baseline"], new["public_best"]) == ("0.0900", "0.7140")
