"""Many runs at once on one RLLOOP_HOME: first-use steps never race, and a run that dies says so.

Real processes on a fresh home each time: the MLflow store made by many processes at once (repeated), the built-in
model asked for by several at once (built once), and one real round in which two separate `rlloop run` processes, a
service with two runs posted at once and an `rlloop bench` with two parallel workers all start together on the same
fresh home: every run finishes, each writes one results row, MLflow holds every run, and the model was built once.
A run that dies on an error shows `failed` with its error in `rlloop runs`, the service, summary.json and
results.csv.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.results.rows import read_results
from tests.agent.service.support import ACTIVE, kill_workers, running_service, wait_for

REPO = Path(__file__).resolve().parents[3]
OPEN_STORE = """
import sys
from pathlib import Path
from agent.tracking.tracker import Tracker

home = Path(sys.argv[1])
tracker = Tracker(f"sqlite:///{home / 'mlflow.db'}", home / "mlartifacts")
tracker.start_parent(sys.argv[2], "arith", {"k": 1})
print("OPENED")
"""
BUILD = """
import sys
from pathlib import Path
from agent.run.models import resolve_base_model

path = resolve_base_model("tiny-arith", Path(sys.argv[1]), on_build=lambda name: print("BUILDING", name, flush=True))
print("MODEL", path)
"""
RUN_ARGS = [
    "--loop-n",
    "1",
    "--trial-steps",
    "5",
    "--eval-limit",
    "20",
    "--sandbox",
    "local",
    "--test-seed",
    "1",
]


def _env(home: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("RLLOOP_", "OPENAI_"))}
    return {**env, "RLLOOP_HOME": str(home), "OMP_NUM_THREADS": "1", "PYTHONPATH": str(REPO)}


def _together(
    commands: list[list[str]], env: dict[str, str], timeout: float
) -> list[subprocess.CompletedProcess[str]]:
    """Start every command at once; wait for all of them."""
    procs = [
        subprocess.Popen(c, env=env, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for c in commands
    ]
    done = []
    for proc in procs:
        out, err = proc.communicate(timeout=timeout)
        done.append(subprocess.CompletedProcess(proc.args, proc.returncode, out, err))
    return done


def _parents(home: Path) -> set[str]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{home / 'mlflow.db'}")
    ids = [e.experiment_id for e in client.search_experiments()]
    runs = client.search_runs(ids, filter_string="tags.`rlloop.kind` = 'parent'") if ids else []
    return {r.data.tags["rlloop.run_id"] for r in runs}


@pytest.mark.slow  # eight processes a round: for the full suite, not the edit-test loop
@pytest.mark.parametrize("round_", range(3))
def test_the_mlflow_store_is_made_once_by_many_processes(tmp_path: Path, round_: int) -> None:
    """Eight processes open a store that does not exist yet, all at once (alembic's migrations race without the
    lock: "Online migration expected to match one row", "table _alembic_tmp_params already exists")."""
    home = tmp_path / f"home{round_}"
    home.mkdir()
    results = _together(
        [[sys.executable, "-c", OPEN_STORE, str(home), f"run-{i}"] for i in range(8)], _env(home), timeout=300
    )
    assert [r.returncode for r in results] == [0] * 8, [r.stderr[-2000:] for r in results if r.returncode]
    assert _parents(home) == {f"run-{i}" for i in range(8)}


@pytest.mark.slow
def test_a_built_in_model_asked_for_at_once_is_built_once(tmp_path: Path) -> None:
    home = tmp_path / "home"
    results = _together([[sys.executable, "-c", BUILD, str(home)] for _ in range(3)], _env(home), timeout=600)
    assert [r.returncode for r in results] == [0] * 3, [r.stderr[-2000:] for r in results]
    assert sum(r.stdout.count("BUILDING tiny-arith") for r in results) == 1
    assert {r.stdout.split("MODEL ", 1)[1].strip() for r in results} == {
        str((home / "models" / "tiny-arith").resolve())
    }
    assert sorted(p.name for p in (home / "models").iterdir()) == ["tiny-arith"]  # no half-made folder left


@pytest.mark.slow
def test_runs_started_together_on_a_fresh_home_all_finish(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two `rlloop run` processes, two runs posted at once to a fresh service (both running together) and a
    two-worker `rlloop bench`, all at once on one fresh home: six runs."""
    home = tmp_path / "home"
    home.mkdir()
    env = {**_env(home), "RLLOOP_TRIAL_STEPS": "5"}
    monkeypatch.setenv("RLLOOP_TRIAL_STEPS", "5")  # the service's workers inherit this process's environment
    monkeypatch.setenv("OMP_NUM_THREADS", "1")
    cli = [sys.executable, "-m", "agent.cli"]
    service_runs = ["svc-1", "svc-2"]
    try:
        with running_service(home, max_concurrent_runs=2) as client:
            for run_id in service_runs:
                body = {"run_id": run_id, "loop_n": 1, "eval_limit": 20, "sandbox": "local", "quiet": True}
                created = client.post("/runs", json=body)
                assert created.status_code == 202, created.text
            results = _together(
                [
                    [*cli, "run", "--run-id", "cli-1", *RUN_ARGS],
                    [*cli, "run", "--run-id", "cli-2", *RUN_ARGS],
                    [
                        *cli,
                        "bench",
                        "--benchmarks",
                        "arith",
                        "--base-models",
                        "tiny-arith",
                        "--seeds",
                        "2",
                        "--sweep-id",
                        "many",
                        "--concurrency",
                        "2",
                        "--timeout",
                        "10m",
                        "--loop-n",
                        "1",
                        "--eval-limit",
                        "20",
                        "--sandbox",
                        "local",
                    ],
                ],  # fmt: skip
                env,
                timeout=1500,
            )
            assert [r.returncode for r in results] == [0] * 3, [
                r.stdout[-1500:] + r.stderr[-1500:] for r in results
            ]
            served = {
                run_id: wait_for(client, run_id, lambda b: b["status"] not in ACTIVE, timeout=900)
                for run_id in service_runs
            }
    finally:
        kill_workers(home)
    assert {body["status"] for body in served.values()} == {"finished"}, served
    rows = read_results(home / "results.csv")
    run_ids = [r["run_id"] for r in rows]
    assert len(run_ids) == 6 == len(set(run_ids)), run_ids  # one row each, none twice
    assert all(r["success"] == "True" for r in rows), rows
    assert _parents(home) == set(run_ids)  # MLflow holds every run
    logs = {run: (home / "runs" / run / "run.log").read_text() for run in run_ids}
    builds = [run for run, log in logs.items() if "building the built-in model tiny-arith" in log]
    assert len(builds) == 1, builds  # built once; the others waited and used it


def test_a_run_that_dies_on_an_error_shows_failed_with_it(tiny_model_home: Path) -> None:
    """The run's workspace cannot be made (a file stands where its folder should be): the run dies on that error,
    and every place that lists runs says `failed` and why; a results row and summary.json say so too."""
    home = tiny_model_home
    (home / "runs" / "doomed").mkdir(parents=True)
    (home / "runs" / "doomed" / "workspace").write_text("in the way")  # the injected crash
    env = _env(home)
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--run-id", "doomed", *RUN_ARGS],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode != 0
    summary = json.loads((home / "runs" / "doomed" / "summary.json").read_text())
    assert summary["status"] == "failed" and summary["error"] and summary["success"] is False
    (row,) = [r for r in read_results(home / "results.csv") if r["run_id"] == "doomed"]
    assert row["success"] == "False" and row["error"] == summary["error"]
    listing = subprocess.run(
        [sys.executable, "-m", "agent.cli", "runs"],
        env={**env, "COLUMNS": "1000"},  # one line a run: the error is read whole, however long the temp path
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert f"doomed failed: {summary['error']}" in " ".join(listing.stdout.split()), listing.stdout
    from agent.service.views import run_summary

    view = run_summary(home / "runs" / "doomed", None, [])
    assert view is not None and view.status == "failed"
