"""End to end through the real CLI: baseline, trials in the sandbox, submissions to the grader, MLflow, results.csv.

Also Ctrl-C / SIGTERM mid-trial and resume. Uses a short budget (few steps, a slice of the hidden test set) so the
whole file runs in a few minutes on 2 cores; `make demo` runs the full-size loop.
"""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
from mlflow import MlflowClient

from agent.results.rows import read_results
from agent.status.runs import collect_runs, read_state

pytestmark = pytest.mark.slow

FAST = [
    "--eval-limit",
    "200",
    "--trial-steps",
    "60",
    "--trial-timeout",
    "5m",
    "--sandbox",
    "local",
    "--submit",
    "all",  # these tests count one submission per trained checkpoint (the policy is tests/agent/loop/test_validation.py)
    "--quiet",
]


def rlloop(home: Path, *args: str, timeout: float = 900) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RLLOOP_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args], env=env, capture_output=True, text=True, timeout=timeout
    )


def _store_scores(grader_dir: Path) -> dict[int, float]:
    conn = sqlite3.connect(grader_dir / "store.db")
    try:
        # what /submit reported: the public part's score (the run splits the hidden set into public and private)
        rows = conn.execute(
            "SELECT id, public_score FROM submissions WHERE public_score IS NOT NULL AND duplicate_of IS NULL"
        ).fetchall()
    finally:
        conn.close()
    return {int(i): float(s) for i, s in rows}


def test_short_run_end_to_end(tmp_path: Path, tiny_model_home: Path) -> None:
    home = tiny_model_home
    result = rlloop(home, "run", "--loop-n", "2", "--timeout", "10m", "--run-id", "e2e-1", *FAST)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = home / "runs" / "e2e-1"

    state = read_state(run_dir)
    assert state["status"] == "finished"
    assert len(state["trials"]) == 2
    assert state["baseline_score"] is not None
    succeeded = [t for t in state["trials"] if t["status"] == "succeeded"]
    assert succeeded, state["trials"]
    assert state["submissions"] == len(succeeded)

    # the built-in default (the line policy) cut the run's two trials from one line: t02 continues t01's optimizer
    # over the second half of one schedule, and the end accounts for where the compute went
    second = state["trials"][1]["proposal"]
    assert state["trials"][0]["status"] == "succeeded", state["trials"][0].get("error")
    assert second["init_from"] == "t01" and second["hyperparameters"]["resume_optimizer"] is True
    assert (second["hyperparameters"]["schedule_from"], second["hyperparameters"]["schedule_to"]) == (
        0.5,
        1.0,
    )
    log = (run_dir / "trials" / "t02" / "log.txt").read_text()
    assert "continuing the starting checkpoint's optimizer" in log, log[-2000:]
    compute = json.loads((run_dir / "summary.json").read_text())["compute"]
    assert compute["total_s"] > 0 and 0.0 < compute["train_share"] < 1.0 and compute["lost_share"] < 1.0

    # the grader's store and the people's mirror agree, submission for submission
    mirror = json.loads((run_dir / "scores.json").read_text())
    mirrored = {
        int(s["submission_id"]): float(s["score"])
        for s in mirror["submissions"]
        if s.get("score") is not None
    }
    assert mirrored == _store_scores(run_dir / "grader")
    assert sorted(mirrored.values()) == sorted(t["score"] for t in succeeded)

    # hidden data never reaches the workspace
    workspace = run_dir / "workspace"
    assert not list(workspace.rglob("test.jsonl"))
    assert sorted(p.name for p in (workspace / "data").iterdir()) == ["train.jsonl", "valid.jsonl"]

    # results.csv row with AutoRL-Bench columns
    rows = [r for r in read_results(home / "results.csv") if r["run_id"] == "e2e-1"]
    assert len(rows) == 1 and rows[0]["success"] == "True"
    assert rows[0]["baseline"] != "" and rows[0]["best_score"] != ""
    assert int(rows[0]["submissions"]) == len(succeeded)

    # MLflow: one parent with the metrics, one nested run per trial, the score plot
    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rlloop/arith")
    assert experiment is not None
    parents = client.search_runs(
        [experiment.experiment_id], "tags.`rlloop.run_id` = 'e2e-1' and tags.`rlloop.kind` = 'parent'"
    )
    assert len(parents) == 1
    parent = parents[0]
    for metric in ("baseline_score", "score", "best_score", "submission_count", "improvement"):
        assert metric in parent.data.metrics, metric
    children = client.search_runs(
        [experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parent.info.run_id}'"
    )
    assert sorted(c.data.tags["rlloop.trial_id"] for c in children) == ["t01", "t02"]
    artifacts = {a.path for a in client.list_artifacts(parent.info.run_id)}
    assert "score_over_submissions.png" in artifacts

    listed = {r.run_id: r for r in collect_runs(home)}
    assert listed["e2e-1"].status == "finished"
    runs_out = rlloop(home, "runs")
    assert "e2e-1" in runs_out.stdout


def test_sigterm_mid_trial_then_resume(tmp_path: Path, tiny_model_home: Path) -> None:
    home = tiny_model_home
    env = {**os.environ, "RLLOOP_HOME": str(home)}
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "run",
            "--loop-n",
            "2",
            "--timeout",
            "10m",
            "--run-id",
            "e2e-int",
            *FAST,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    log = home / "runs" / "e2e-int" / "trials" / "t01" / "log.txt"
    deadline = time.monotonic() + 300
    while time.monotonic() < deadline and not (log.exists() and log.stat().st_size > 0):
        time.sleep(0.5)
    assert log.exists(), "trial t01 never started"
    time.sleep(1.0)
    proc.send_signal(signal.SIGTERM)
    out, _ = proc.communicate(timeout=120)
    assert proc.returncode == 130, out
    assert "resume with: rlloop resume e2e-int" in (home / "runs" / "e2e-int" / "run.log").read_text()

    # no orphan: nothing still runs that names this run's folder (the sandbox's binds name it; trials see /trial)
    time.sleep(1.0)
    leftovers = subprocess.run(
        ["pgrep", "-af", str(home / "runs" / "e2e-int")], capture_output=True, text=True
    )
    assert leftovers.stdout.strip() == "", leftovers.stdout
    rows = [r for r in read_results(home / "results.csv") if r["run_id"] == "e2e-int"]
    assert rows and rows[-1]["success"] == "False"
    assert (log.parent / "log.txt").exists()  # logs kept

    result = rlloop(home, "resume", "e2e-int")
    assert result.returncode == 0, result.stdout + result.stderr
    state = read_state(home / "runs" / "e2e-int")
    assert state["status"] == "finished"
    assert [t["trial_id"] for t in state["trials"]] == ["t01", "t02"]
    scores = _store_scores(home / "runs" / "e2e-int" / "grader")
    assert len(scores) == state["submissions"]
