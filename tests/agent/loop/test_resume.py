"""Crash-safe resume: kill -9 the run at every node, resume it, and get the state an uninterrupted run gets.

The crash is a real SIGKILL of the run's process (`RLLOOP_FAILPOINT` picks the moment, so the test is
deterministic); trials use a fixed step count so the same proposal trains the same checkpoint twice.
"""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest

from agent.core import TrialRecord
from agent.results.rows import read_results
from agent.status.runs import read_state
from tests.agent.loop.test_state import checkpointed
from tests.support.processes import run_processes, running_containers, still_alive

pytestmark = pytest.mark.slow

ARGS = [
    "--loop-n",
    "2",
    "--trial-steps",
    "25",
    "--eval-limit",
    "120",
    "--public-fraction",
    "0",
    "--sandbox",
    "local",
    "--timeout",
    "30m",
    "--submit",
    "all",  # every trial graded, so submit:1 always has a submission to die after (improved: test_validation.py)
    "--quiet",
]


def _env(home: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "RLLOOP_FAILPOINT"}
    # one hidden test set for the reference and every crashed run (by default each run draws its own secret seed)
    return {**env, "RLLOOP_HOME": str(home), "RLLOOP_TEST_SEED": "20261201", **extra}


def _run(home: Path, *args: str, **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=_env(home, **env),
        capture_output=True,
        text=True,
        timeout=900,
    )


def _submissions(run_dir: Path) -> list[tuple[str, float | None, int | None]]:
    conn = sqlite3.connect(run_dir / "grader" / "store.db")
    try:
        rows = conn.execute("SELECT model_path, score, duplicate_of FROM submissions ORDER BY id").fetchall()
    finally:
        conn.close()
    return [(Path(p).parent.name, s, d) for p, s, d in rows]


def _assert_nothing_left(run_dir: Path, within_s: float = 5.0) -> None:
    """No process (trial, grader, the run itself) or container of the killed attempt is alive within `within_s`."""
    pids = run_processes(run_dir.name, run_dir / "workspace")
    left = still_alive(pids, within_s=within_s)
    assert not left, f"alive {within_s:g}s after the run was killed: {left}"
    containers = running_containers(run_dir.name, within_s=within_s)
    assert not containers, f"containers still running after the run was killed: {containers}"


def _summary(state: dict[str, Any]) -> list[tuple[str, str, str, float | None]]:
    return [(t["trial_id"], t["proposal"]["recipe"], t["status"], t["score"]) for t in state["trials"]]


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Any]:
    """An uninterrupted run with the same settings: what every resumed run must end up equal to."""
    import shutil

    home = tmp_path_factory.mktemp("ref")
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    result = _run(home, "run", "--run-id", "ref", *ARGS)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = home / "runs" / "ref"
    return {"state": read_state(run_dir), "submissions": _submissions(run_dir)}


# The nodes a run passes, in its order: mid-trial, graded but not recorded, proposing, recording. One run is killed at
# each in turn, every attempt resumed by the next (a crash while resuming included), then resumed to its end.
FAILPOINTS = ["run_trial:1", "submit:1", "propose:2", "record:2"]


def test_kill_9_at_every_node_in_turn_then_resume_equals_uninterrupted(
    reference: dict[str, Any], tiny_model_home: Path
) -> None:
    home = tiny_model_home
    run_dir = home / "runs" / "crash"
    for attempt, failpoint in enumerate(FAILPOINTS):
        command = ["run", "--run-id", "crash", *ARGS] if attempt == 0 else ["resume", "crash"]
        crashed = _run(home, *command, RLLOOP_FAILPOINT=failpoint)
        assert crashed.returncode == -signal.SIGKILL, f"{failpoint}: {crashed.stdout}{crashed.stderr}"
        _assert_nothing_left(run_dir)  # before the next attempt starts a trial in the same folder
        assert read_state(run_dir).get("status") != "finished", failpoint

    resumed = _run(home, "resume", "crash")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = read_state(run_dir)
    assert state["status"] == "finished"
    assert _summary(state) == _summary(reference["state"])
    assert state["submissions"] == reference["state"]["submissions"]
    # nothing submitted twice: the grader's store holds exactly the reference's submissions
    assert _submissions(run_dir) == reference["submissions"]
    # the resumed run's state holds its trials as records, not as their dumps
    assert {type(t) for t in checkpointed(run_dir)["trials"]} == {TrialRecord}
    # the MLflow parent run is continued, not duplicated
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rlloop/arith")
    assert experiment is not None
    parents = client.search_runs(
        [experiment.experiment_id], "tags.`rlloop.run_id` = 'crash' and tags.`rlloop.kind` = 'parent'"
    )
    assert len(parents) == 1
    children = client.search_runs(
        [experiment.experiment_id], f"tags.`mlflow.parentRunId` = '{parents[0].info.run_id}'"
    )
    assert sorted(c.data.tags["rlloop.trial_id"] for c in children) == ["t01", "t02"]
    scores = client.get_metric_history(parents[0].info.run_id, "score")
    assert len(scores) == state["submissions"]
    rows = [r for r in read_results(home / "results.csv") if r["run_id"] == "crash"]
    assert [r["submissions"] for r in rows] == [str(state["submissions"])]  # one row: the finished run's


def test_kill_9_while_waiting_for_approval(tiny_model_home: Path) -> None:
    home = tiny_model_home
    args = [a if a != "2" else "1" for a in ARGS]  # one trial is enough here
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "run", "--run-id", "gated", "--approval", "always", *args],
        env=_env(home),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    pending = home / "runs" / "gated" / "approvals" / "t01.pending.json"
    deadline = time.monotonic() + 300
    while not pending.exists() and time.monotonic() < deadline and proc.poll() is None:
        time.sleep(0.3)
    assert pending.exists(), f"the proposal never reached the approval gate (exit code {proc.poll()})"
    proc.send_signal(signal.SIGKILL)
    proc.wait(timeout=30)
    _assert_nothing_left(home / "runs" / "gated")

    resume = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "resume", "gated"],
        env=_env(home),
        stdout=subprocess.PIPE,
        text=True,
    )
    time.sleep(2.0)
    approve = _run(home, "approve", "gated", "--set", "learning_rate=0.0005", "--by", "reviewer-1")
    assert approve.returncode == 0, approve.stderr
    out, _ = resume.communicate(timeout=600)
    assert resume.returncode == 0, out
    state = read_state(home / "runs" / "gated")
    assert state["status"] == "finished"
    (trial,) = state["trials"]
    assert trial["approval"]["by"] == "reviewer-1"
    assert trial["approval"]["action"] == "edit"
    assert trial["proposal"]["hyperparameters"]["learning_rate"] == 0.0005
    assert trial["status"] == "succeeded"


@pytest.mark.docker  # on the local sandbox, the first attempt of the test above
@pytest.mark.parametrize("backend", ["docker"])
def test_no_trial_outlives_its_run_killed_9(
    backend: str, reference: dict[str, Any], tiny_model_home: Path
) -> None:
    """kill -9 mid-trial: within 5 s nothing of the run is alive (trial, grader, container); the resumed run ends
    and logs what was left, and ends up with the uninterrupted run's trials and submissions."""
    from tests.sandbox.docker_support import require_docker

    require_docker()
    home = tiny_model_home
    args = [backend if a == "local" else a for a in ARGS]
    crashed = _run(home, "run", "--run-id", "orphan", *args, RLLOOP_FAILPOINT="run_trial:1")
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout + crashed.stderr
    run_dir = home / "runs" / "orphan"
    assert (run_dir / "trials" / "t01").is_dir(), "killed before the trial started"
    _assert_nothing_left(run_dir)

    resumed = _run(home, "resume", "orphan")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = read_state(run_dir)
    assert state["status"] == "finished"
    trials = [(t["trial_id"], t["proposal"]["recipe"], t["status"]) for t in state["trials"]]
    assert trials == [(t, r, st) for t, r, st, _ in _summary(reference["state"])]
    if backend == "local":  # the same trainer on the same host: the very same checkpoints and scores
        assert _summary(state) == _summary(reference["state"])
        assert _submissions(run_dir) == reference["submissions"]
    assert [s[0] for s in _submissions(run_dir)] == [s[0] for s in reference["submissions"]]
    if backend == "docker":  # the exited container of the killed attempt was removed, and said so
        assert "leftover trial container of t01" in (run_dir / "run.log").read_text()
        assert not running_containers("orphan", within_s=0)
