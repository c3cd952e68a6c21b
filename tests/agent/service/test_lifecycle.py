"""A real research run through the service: created, listed, waiting for approval, cancelled (resumable, results
row written), resumed, then ended by a reviewer's `terminate` sent through the API. Uses tiny-arith and a slice of the
hidden test set, and never trains (approval `always` stops the run before its first trial)."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from agent.loop.approvals import read_decision
from agent.results.rows import read_results
from tests.agent.service.support import kill_workers, running_service, wait_for

pytestmark = pytest.mark.slow


def _waiting(body: dict[str, object]) -> bool:
    return body["status"] == "waiting for approval"


def test_run_cancel_resume_and_terminate_through_the_api(tiny_model_home: Path) -> None:
    home = tiny_model_home
    request = {
        "run_id": "svc-1",
        "loop_n": 1,
        "approval": "always",
        "timeout": "10m",
        "sandbox": "local",
        "eval_limit": 40,
        "quiet": True,
    }
    try:
        with running_service(home, max_concurrent_runs=1) as client:
            created = client.post("/runs", json=request)
            assert created.status_code == 202, created.text
            assert [r["run_id"] for r in client.get("/runs").json()] == ["svc-1"]

            body = wait_for(client, "svc-1", _waiting, timeout=600)
            assert body["pending_approvals"] == ["t01"]
            assert body["baseline"] is not None and body["current"]["trial_id"] == "t01"
            assert body["mlflow_parent"] and "#/experiments/" in body["mlflow_url"]
            assert body["mlflow_url"].endswith(f"/runs/{body['mlflow_parent']}?workflowType=machine_learning")
            approvals = client.get("/approvals").json()
            assert [(a["run_id"], a["trial_id"], a["run_active"]) for a in approvals] == [
                ("svc-1", "t01", True)
            ]

            cancelled = client.post("/runs/svc-1/cancel")
            assert cancelled.status_code == 202
            body = wait_for(client, "svc-1", lambda b: b["worker"]["state"] == "exited", timeout=120)
            assert body["status"] == "interrupted (resumable)", body
            assert body["worker"]["exit_code"] == 130 and body["links"]["resume"] == "/runs/svc-1/resume"
            rows = [r for r in read_results(home / "results.csv") if r["run_id"] == "svc-1"]
            assert rows and rows[-1]["success"] == "False"

            resumed = client.post("/runs/svc-1/resume")
            assert resumed.status_code == 202 and resumed.json()["status"] in ("queued", "running")
            assert client.post("/runs/svc-1/resume").status_code == 409  # already running
            wait_for(client, "svc-1", _waiting, timeout=600)

            decided = client.post(  # signed in with the service's admin token: its user is recorded
                "/approvals/svc-1/t01", json={"action": "terminate", "reason": "done"}
            )
            assert decided.status_code == 200, decided.text
            body = wait_for(client, "svc-1", lambda b: b["worker"]["state"] == "exited", timeout=300)
            assert body["status"] == "terminated", body
            # the terminated proposal is recorded as a rejected trial, with who ended the run and why
            assert body["stop_reason"] == "terminated by a reviewer"
            (trial,) = body["trial_list"]
            assert trial["status"] == "rejected" and "terminated by admin" in trial["error"]
            assert trial["approval"]["by"] == "admin" and trial["approval"]["action"] == "terminate"
            assert body["worker"]["exit_code"] == 0
            assert client.post("/runs/svc-1/resume").status_code == 409  # nothing left to resume
    finally:
        kill_workers(home)
    approvals_dir = home / "runs" / "svc-1" / "approvals"
    assert read_decision(home / "runs" / "svc-1", "t01") is None  # consumed by the run
    assert (approvals_dir / "t01.decided.json").exists()
    shutil.rmtree(home / "runs" / "svc-1" / "workspace", ignore_errors=True)
