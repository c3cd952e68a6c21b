"""results.csv keeps AutoRL-Bench's columns and never loses a row; the plot is a real PNG."""

from __future__ import annotations

import threading
from pathlib import Path

from agent.results.plots import plot_scores
from agent.results.rows import RESULTS_COLUMNS, append_result_row, read_results


def test_rows_append_under_concurrency(tmp_path: Path) -> None:
    csv_path = tmp_path / "results.csv"

    def write(i: int) -> None:
        append_result_row(csv_path, {"run_id": f"r{i}", "task": "arith", "success": True, "best_score": 0.5})

    threads = [threading.Thread(target=write, args=(i,)) for i in range(20)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = read_results(csv_path)
    assert sorted(r["run_id"] for r in rows) == sorted(f"r{i}" for i in range(20))
    assert csv_path.read_text().splitlines()[0].split(",") == RESULTS_COLUMNS


def test_a_resumed_runs_row_replaces_the_one_it_wrote_when_interrupted(tmp_path: Path) -> None:
    csv_path = tmp_path / "results.csv"
    append_result_row(csv_path, {"run_id": "a", "success": False, "best_score": None})  # interrupted
    append_result_row(csv_path, {"run_id": "b", "success": True, "best_score": 0.4})
    append_result_row(csv_path, {"run_id": "a", "success": True, "best_score": 0.7})  # resumed, then finished
    rows = read_results(csv_path)
    assert [(r["run_id"], r["best_score"]) for r in rows] == [("b", "0.4"), ("a", "0.7")]
    assert csv_path.read_text().splitlines()[0].split(",") == RESULTS_COLUMNS
    assert not list(tmp_path.glob(".*.tmp"))


def test_plot(tmp_path: Path) -> None:
    path = plot_scores(tmp_path / "p.png", [0.3, 0.6, 0.5], 0.2, "run")
    assert path is not None and path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert plot_scores(tmp_path / "none.png", [], 0.2, "run") is None


def test_an_older_file_gets_the_new_columns_without_losing_a_row(tmp_path: Path) -> None:
    csv_path = tmp_path / "results.csv"
    old_columns = [c for c in RESULTS_COLUMNS if c != "isolation"]
    csv_path.write_text(
        ",".join(old_columns) + "\n" + ",".join("old" if c == "run_id" else "" for c in old_columns) + "\n"
    )
    threads = [
        threading.Thread(target=append_result_row, args=(csv_path, {"run_id": f"r{i}", "isolation": "none"}))
        for i in range(10)
    ]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    rows = read_results(csv_path)
    assert csv_path.read_text().splitlines()[0].split(",") == RESULTS_COLUMNS
    assert sorted(r["run_id"] for r in rows) == sorted(["old", *(f"r{i}" for i in range(10))])
    assert {r["isolation"] for r in rows if r["run_id"] != "old"} == {"none"}
    assert not list(tmp_path.glob(".*.tmp"))


def test_flags_show_on_the_submission_line_and_in_the_summary(tmp_path: Path) -> None:
    from agent.results.flags import flagged_report, submission_flags
    from agent.run.reporting import Reporter

    evidence = "3 of 40 hidden test items found in trials/t02/data.txt (first: '[13, 1, 22] 286')"
    grading = {"flagged": True, "flags": [{"check": "contamination", "evidence": evidence}]}
    reporter = Reporter(tmp_path / "run.log", quiet=True)
    reporter.info(f"    submission #2: 0.900{submission_flags(grading)}")
    reporter.close()
    line = (tmp_path / "run.log").read_text()
    assert "FLAGGED (contamination: " in line and evidence in line  # brackets in evidence survive the markup
    assert submission_flags({"is_copy": True}) == " [yellow](copy of the base model)[/yellow]"
    assert submission_flags({"flags": []}) == ""
    trials = [{"trial_id": "t01", "grading": {}}, {"trial_id": "t02", "grading": grading}]
    (summary,) = flagged_report(trials)
    assert summary.startswith("t02 was flagged by the grader") and "trials/t02/data.txt" in summary
