"""The run service over real HTTP: validation, workers, the queue, cancel, approvals, recovery after a restart.

These tests need no model: runs that must fail fail fast in a real worker (a base model folder that is not a
checkpoint). The full lifecycle on a real run is in test_service_lifecycle.py (slow).
"""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import datetime
from pathlib import Path

import pytest
from fastapi.testclient import TestClient

from agent.core.records import Proposal, TrialRecord
from agent.launch import LaunchRequest
from agent.loop.approvals import publish_pending, read_decision
from agent.run import RunConfig
from agent.service import ServiceSettings, create_app
from agent.service.records import WORKER_LOG_NAME, WorkerRecord, load_record, save_record, save_request
from agent.service.workers import RunConflictError
from tasks import procfs
from tests.agent.service.support import ACTIVE, kill_workers, running_service, wait_for


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    (home / "runs").mkdir(parents=True)
    return home


@pytest.fixture
def not_a_model(tmp_path: Path) -> str:
    """A folder that exists but holds no checkpoint: the worker fails at once with one clear error."""
    folder = tmp_path / "not-a-model"
    folder.mkdir()
    return str(folder)


def _pending(run_dir: Path, trial_id: str, index: int = 1) -> TrialRecord:
    record = TrialRecord(
        trial_id=trial_id,
        index=index,
        proposal=Proposal(
            hypothesis=f"try {trial_id}", recipe="sft", hyperparameters={"learning_rate": 1e-3}
        ),
    )
    publish_pending(run_dir, record)
    return record


def test_openapi_and_validation_errors(home: Path) -> None:
    with running_service(home) as client:
        schema = client.get("/openapi.json").json()
        assert {
            "/runs",
            "/runs/{run_id}",
            "/runs/{run_id}/cancel",
            "/runs/{run_id}/resume",
            "/approvals",
        } <= set(schema["paths"])
        assert "/approvals/{run_id}/{trial_id}" in schema["paths"]
        request_fields = schema["components"]["schemas"]["RunRequest"]["properties"]
        assert "loop_n" in request_fields and "home" not in request_fields

        def detail(body: dict[str, object]) -> list[dict[str, object]]:
            response = client.post("/runs", json=body)
            assert response.status_code == 422, response.text
            return list(response.json()["detail"])

        unknown = detail({"benchmark": "no-such-bench"})
        assert unknown[0]["loc"] == ["body", "benchmark"] and "unknown benchmark" in str(unknown[0]["msg"])
        timeout = detail({"timeout": "soon"})
        assert timeout[0]["loc"] == ["body", "timeout"] and "cannot read 'soon' as a duration" in str(
            timeout[0]["msg"]
        )
        assert "unknown approval policy" in str(detail({"approval": "sometimes"})[0]["msg"])
        assert detail({"loop_n": 0})[0]["loc"] == ["body", "loop_n"]
        assert detail({"home": "/elsewhere"})[0]["type"] == "extra_forbidden"  # the service owns RLLOOP_HOME
        assert detail({"run_id": "../escape"})[0]["loc"] == ["body", "run_id"]
        assert client.get("/runs").json() == []  # nothing half-created
        assert not any((home / "runs").iterdir())

        assert client.get("/runs/nope").status_code == 404
        assert client.post("/runs/nope/cancel").status_code == 404
        assert client.post("/runs/nope/resume").status_code == 404


def test_a_run_takes_the_services_environment_for_what_its_request_leaves_out(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """As `rlloop run` does: the body, then the service's RLLOOP_* environment, then the defaults. The worker gets
    the config as the service validated it; an environment value that fails says it came from there."""
    app = create_app(ServiceSettings(home=home, no_auth=True))
    with TestClient(app, base_url="http://127.0.0.1") as client:
        queued: list[RunConfig] = []

        def submit(config: RunConfig) -> None:
            queued.append(config)
            raise RunConflictError("recorded, not started")

        app.state.pool.submit = submit
        monkeypatch.setenv("RLLOOP_LOOP_N", "9")
        monkeypatch.setenv("RLLOOP_SEED", "5")
        assert client.post("/runs", json={"run_id": "from-env", "seed": 1}).status_code == 409
        (config,) = queued
        assert (config.run_id, config.loop_n, config.seed, config.home) == ("from-env", 9, 1, home.resolve())
        monkeypatch.setenv("RLLOOP_LOOP_N", "0")
        refused = client.post("/runs", json={"run_id": "bad-env"})
        assert refused.status_code == 422
        assert refused.json()["detail"][0]["loc"] == ["env", "RLLOOP_LOOP_N"]


def test_failed_run_shows_its_one_line_error(
    home: Path, not_a_model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("RLLOOP_LOOP_N", "9")  # the service's own environment must not beat the request
    with running_service(home) as client:
        created = client.post("/runs", json={"base_model": not_a_model, "run_id": "bad-model", "loop_n": 1})
        assert created.status_code == 202, created.text
        assert created.json()["links"]["self"] == "/runs/bad-model"
        assert client.post("/runs", json={"run_id": "bad-model"}).status_code == 409
        body = wait_for(client, "bad-model", lambda b: b["status"] not in ACTIVE, timeout=180)
        assert body["status"] == "failed"
        assert body["worker"]["exit_code"] == 2
        assert "is not a Hugging Face checkpoint" in body["error"]
        assert body["config"]["loop_n"] == 1 and body["config"]["base_model"] == not_a_model
        listed = {r["run_id"]: r for r in client.get("/runs").json()}
        assert listed["bad-model"]["status"] == "failed" and listed["bad-model"]["managed"] is True
        assert client.post("/runs/bad-model/cancel").status_code == 409  # not running
    assert (home / "runs" / "bad-model" / WORKER_LOG_NAME).exists()
    assert json.loads((home / "runs" / "bad-model" / "run.json").read_text())["loop_n"] == 1


def test_concurrency_limit_queues_the_third_run(home: Path, not_a_model: str) -> None:
    try:
        with running_service(home, max_concurrent_runs=2) as client:
            statuses = [
                client.post("/runs", json={"base_model": not_a_model, "run_id": f"q{i}"}).json()["status"]
                for i in range(1, 5)
            ]
            assert statuses == ["running", "running", "queued", "queued"]
            assert client.get("/health").json()["running"] == 2
            cancelled = client.post("/runs/q4/cancel")
            assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"

            bodies = {
                rid: wait_for(client, rid, lambda b: b["status"] not in ACTIVE, 240)
                for rid in ("q1", "q2", "q3")
            }
            assert all(b["status"] == "failed" for b in bodies.values())
            first_end = min(datetime.fromisoformat(bodies[r]["worker"]["ended_at"]) for r in ("q1", "q2"))
            assert (
                datetime.fromisoformat(bodies["q3"]["worker"]["started_at"]) >= first_end
            )  # waited for a slot
            q4 = client.get("/runs/q4").json()
            assert q4["status"] == "cancelled" and q4["worker"]["started_at"] is None
            assert not (home / "runs" / "q4" / WORKER_LOG_NAME).exists()  # never started
    finally:
        kill_workers(home)


def test_approvals_api_writes_the_decision_files(home: Path) -> None:
    run_dir = home / "runs" / "review-1"
    for index, trial in enumerate(("t01", "t02", "t03", "t04"), start=1):
        _pending(run_dir, trial, index)
    with running_service(home) as client:
        pending = client.get("/approvals").json()
        assert [(p["run_id"], p["trial_id"]) for p in pending] == [
            ("review-1", f"t0{i}") for i in range(1, 5)
        ]
        assert pending[0]["hyperparameters"] == {"learning_rate": 1e-3}
        assert pending[0]["decide"] == "/approvals/review-1/t01"

        ok = client.post("/approvals/review-1/t01", json={"action": "approve"})
        assert ok.status_code == 200, ok.text
        decision = read_decision(run_dir, "t01")  # signed in with the admin token: its user is recorded
        assert decision is not None and decision.action == "approve" and decision.by == "admin"

        edit = {"action": "edit", "set": {"learning_rate": 5e-4, "max_steps": 20}, "train_py": "print(1)"}
        assert client.post("/approvals/review-1/t02", json=edit).status_code == 200
        edited = read_decision(run_dir, "t02")
        assert edited is not None and edited.set == {"learning_rate": 5e-4, "max_steps": 20}
        assert edited.train_py == "print(1)"

        broken = client.post(  # a body that is not JSON at all: 400, said plainly (a wrong field stays 422)
            "/approvals/review-1/t03",
            content=b'{"action": "rej',
            headers={"Content-Type": "application/json"},
        )
        assert broken.status_code == 400 and "the request body is not valid JSON" in broken.json()["detail"]
        assert read_decision(run_dir, "t03") is None
        missing_reason = client.post("/approvals/review-1/t03", json={"action": "reject"})
        assert missing_reason.status_code == 422 and "needs a reason" in missing_reason.text
        assert read_decision(run_dir, "t03") is None
        assert (
            client.post(
                "/approvals/review-1/t03", json={"action": "reject", "reason": "lr too high"}
            ).status_code
            == 200
        )
        rejected = read_decision(run_dir, "t03")
        assert rejected is not None and rejected.action == "reject" and rejected.reason == "lr too high"

        assert client.post("/approvals/review-1/t04", json={"action": "edit"}).status_code == 422
        assert (
            client.post("/approvals/review-1/t04", json={"action": "terminate", "by": "admin"}).status_code
            == 200
        )
        terminated = read_decision(run_dir, "t04")
        assert terminated is not None and terminated.action == "terminate"

        nothing = client.post("/approvals/review-1/t09", json={"action": "approve"})
        assert nothing.status_code == 404 and "nothing waits" in nothing.json()["detail"]
        assert client.post("/approvals/other-run/t01", json={"action": "approve"}).status_code == 404
        assert client.post("/approvals/review-1/.hidden", json={"action": "approve"}).status_code == 422


def test_page_is_served(home: Path) -> None:
    with running_service(home) as client:
        page = client.get("/")
        assert page.status_code == 200 and "text/html" in page.headers["content-type"]
        assert 'id="approvals"' in page.text and "/approvals" in page.text
        assert 'id="open-banner"' in page.text  # shown when /health says the service is open


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_restart_resumes_dead_workers_adopts_live_ones_and_starts_queued(
    home: Path, not_a_model: str
) -> None:
    runs = home / "runs"
    config = {"base_model": not_a_model, "benchmark": "arith", "loop_n": 1}
    # a run whose worker died with the service: started (run.json), not finished
    crashed = runs / "crashed"
    crashed.mkdir()
    (crashed / "run.json").write_text(json.dumps({**config, "home": str(home), "run_id": "crashed"}))
    save_record(
        crashed, WorkerRecord(run_id="crashed", state="running", pid=_dead_pid(), process_start="1", starts=1)
    )
    # a run the user cancelled: stays as it is
    cancelled = runs / "cancelled"
    cancelled.mkdir()
    (cancelled / "run.json").write_text(json.dumps({**config, "home": str(home), "run_id": "cancelled"}))
    save_record(
        cancelled, WorkerRecord(run_id="cancelled", state="running", pid=_dead_pid(), cancel_requested=True)
    )
    # a run still queued when the service stopped
    queued = runs / "queued"
    queued.mkdir()
    save_request(queued, LaunchRequest(config=RunConfig(**config, home=home, run_id="queued")))
    save_record(queued, WorkerRecord(run_id="queued", state="queued"))
    # a worker that outlived the service (its own session, like the service's workers)
    live = subprocess.Popen(["sleep", "120"], start_new_session=True)
    adopted = runs / "adopted"
    adopted.mkdir()
    save_record(
        adopted,
        WorkerRecord(
            run_id="adopted", state="running", pid=live.pid, process_start=procfs.start_time(live.pid)
        ),
    )
    try:
        with running_service(home, max_concurrent_runs=4) as client:
            assert client.get("/runs/adopted").json()["status"] == "running"
            crashed_body = wait_for(
                client, "crashed", lambda b: b["worker"]["state"] == "exited", timeout=180
            )
            assert (
                crashed_body["worker"]["command"] == "resume" and crashed_body["worker"]["auto_resumes"] == 1
            )
            log = (crashed / WORKER_LOG_NAME).read_text()
            assert "died with the service; resuming" in log and "starting (resume crashed): " in log
            queued_body = wait_for(client, "queued", lambda b: b["worker"]["state"] == "exited", timeout=180)
            assert queued_body["worker"]["command"] == "run" and queued_body["status"] == "failed"
            assert client.get("/runs/cancelled").json()["worker"]["auto_resumes"] == 0
            assert not (cancelled / WORKER_LOG_NAME).exists()

            stop = client.post("/runs/adopted/cancel")  # SIGTERM to the adopted worker's process group
            assert stop.status_code == 202
            assert live.wait(timeout=10) == -15
            body = wait_for(client, "adopted", lambda b: b["worker"]["state"] == "exited", timeout=30)
            assert body["status"] == "cancelled"
    finally:
        if live.poll() is None:
            live.kill()
            live.wait()
        kill_workers(home)
    record = load_record(crashed)
    assert record is not None and record.state == "exited" and record.starts == 2
