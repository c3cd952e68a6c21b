"""results.csv keeps AutoRL-Bench's columns and never loses a row; the plot is a real PNG."""

from __future__ import annotations

import threading
from pathlib import Path

from agent.reporting import RESULTS_COLUMNS, append_result_row, plot_scores, read_results


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
