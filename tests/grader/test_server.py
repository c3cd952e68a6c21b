"""The grading server over real HTTP: a `python -m grader serve` subprocess on 127.0.0.1."""

from __future__ import annotations

import json
import os
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.grader.conftest import GraderProcess, copy_checkpoint
from tests.grader.tiny import make_tiny_model

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def server(tmp_path_factory: pytest.TempPathFactory, tiny_base: Path) -> Iterator[GraderProcess]:
    grader = GraderProcess(tmp_path_factory.mktemp("server"), tiny_base, public_fraction=0.5)
    grader.start()
    yield grader
    grader.stop()


def test_health_reports_ready_with_baseline(server: GraderProcess) -> None:
    health = server.get("/health")
    assert health["status"] == "ok" and health["ready"] is True
    assert 0.0 <= health["baseline_score"] <= 1.0
    assert health["n"] == 20  # public half of the 40 evaluated samples
    assert (server.private_dir / "test.jsonl").is_file()
    assert (server.private_dir / "grader.log").read_text().count("ready") >= 1
    assert server.get("/time")["elapsed_seconds"] >= 0


def test_submit_flow_and_mirror(server: GraderProcess, tmp_path: Path) -> None:
    ckpt = make_tiny_model(server.workspace / "trial-1", seed=11)
    response = server.submit(ckpt)
    assert response.status_code == 200, response.text
    body = response.json()
    expected = {"submission_id", "score", "baseline_score", "improvement", "best", "total_submissions"}
    expected |= {
        "elapsed_seconds",
        "remaining_submissions",
        "n",
        "ci_low",
        "ci_high",
        "duplicate_of",
        "is_copy",
    }
    assert expected <= set(body)
    assert body["improvement"] == pytest.approx(body["score"] - body["baseline_score"])
    assert body["ci_low"] <= body["score"] <= body["ci_high"]
    assert body["n"] == 20 and body["is_copy"] is False and body["duplicate_of"] is None
    scores = server.get("/scores")
    mine = [s for s in scores["submissions"] if s["submission_id"] == body["submission_id"]]
    assert len(mine) == 1 and mine[0]["status"] == "done"
    assert "private_score" not in mine[0]  # hidden while the run is live
    assert json.loads(server.mirror.read_text()) == scores
    assert server.get("/best")["submission_id"] is not None


def test_token_required(server: GraderProcess) -> None:
    ckpt = server.workspace / "trial-1"
    assert server.submit(ckpt, token=None).status_code == 401
    assert server.submit(ckpt, token="wrong-token-000").status_code == 401
    assert httpx.post(f"{server.url}/finalize", timeout=10).status_code == 401
    assert httpx.post(
        f"{server.url}/baseline", json={"score": 1.0}, headers=server.auth, timeout=10
    ).status_code in (
        404,
        405,
    )


def test_bad_requests_are_4xx_with_reasons(server: GraderProcess, tmp_path: Path) -> None:
    ws = server.workspace
    (ws / "empty").mkdir()
    (ws / "notes").mkdir()
    (ws / "notes" / "readme.txt").write_text("hello")
    remote = copy_checkpoint(ws / "trial-1", ws / "remote")
    config = json.loads((remote / "config.json").read_text())
    config["auto_map"] = {"AutoModelForCausalLM": "modeling_evil.EvilModel"}
    (remote / "config.json").write_text(json.dumps(config))
    outside = make_tiny_model(tmp_path / "outside-model", seed=3)
    os.symlink(outside, ws / "escape")
    leaky = copy_checkpoint(ws / "trial-1", ws / "leaky")
    (leaky / "model.safetensors").unlink()
    os.symlink(server.private_dir / "test.jsonl", leaky / "model.safetensors")

    cases = {
        "relative/path": "absolute",
        str(ws / "missing"): "does not exist",
        str(ws / "empty"): "not a model folder",
        str(ws / "notes"): "not a model folder",
        str(ws / "remote"): "remote code",
        str(outside): "outside the allowed submission root",
        str(ws / "escape"): "is not a folder (a link or a file); it is not followed",
        str(leaky): "model.safetensors is a symlink",
        str(server.private_dir / "test.jsonl"): "outside the allowed submission root",
    }
    # the server's own hidden set (drawn from its run's secret seed), not one a caller could regenerate
    test_prompt = json.loads((server.private_dir / "test.jsonl").read_text().splitlines()[0])["prompt"]
    for path, reason in cases.items():
        response = server.submit(path)
        assert 400 <= response.status_code < 500, (path, response.text)
        assert reason in response.json()["detail"], (path, response.text)
        assert test_prompt not in response.text
    for bad in (b"not json", b'{"path": "/x"}', b"[]"):
        response = httpx.post(f"{server.url}/submit", content=bad, headers=server.auth, timeout=10)
        assert response.status_code == 422 and "model_path" in response.json()["detail"]
    assert server.get("/health")["ready"] is True  # still serving


def test_duplicates_by_content_and_copies(server: GraderProcess) -> None:
    ws = server.workspace
    first = server.submit(ws / "trial-1").json()
    assert first["duplicate_of"] is not None  # same folder again
    again = copy_checkpoint(ws / "trial-1", ws / "trial-1-copy")
    os.utime(again / "model.safetensors", (time.time() + 3600, time.time() + 3600))
    dup = server.submit(again).json()
    assert dup["duplicate_of"] == first["duplicate_of"] and dup["score"] == first["score"]
    before = server.get("/scores")
    total_before = sum(
        1 for s in before["submissions"] if s["duplicate_of"] is None and s["status"] == "done"
    )
    copy = server.submit(copy_checkpoint(Path(server.config["base_model"]), ws / "base-copy")).json()
    assert copy["is_copy"] is True and copy["score"] == pytest.approx(copy["baseline_score"])
    after = server.get("/scores")
    total_after = sum(1 for s in after["submissions"] if s["duplicate_of"] is None and s["status"] == "done")
    assert total_after == total_before + 1


def test_submission_cap_interval_and_finalize(grader_factory: Any) -> None:
    grader: GraderProcess = grader_factory(
        "limits", max_submissions=2, min_interval_s=6.0, public_fraction=0.5
    )  # the interval counts from a submission's arrival: long enough for the first to be scored on a busy machine
    grader.start()
    a = make_tiny_model(grader.workspace / "a", seed=21)
    b = make_tiny_model(grader.workspace / "b", seed=22)
    c = make_tiny_model(grader.workspace / "c", seed=23)
    first = grader.submit(a)
    assert first.status_code == 200 and first.json()["remaining_submissions"] == 1
    too_soon = grader.submit(b)
    assert too_soon.status_code == 429 and "apart" in too_soon.json()["detail"]
    time.sleep(6.1)
    assert grader.submit(b).status_code == 200
    time.sleep(6.1)
    capped = grader.submit(c)
    assert capped.status_code == 429 and "limit reached" in capped.json()["detail"]
    assert grader.submit(a).json()["duplicate_of"] == first.json()["submission_id"]  # duplicates are free

    assert httpx.post(f"{grader.url}/finalize", timeout=30).status_code == 401
    metrics = httpx.post(f"{grader.url}/finalize", headers=grader.auth, timeout=60).json()
    assert metrics["valid_submission_rate"] == 1.0 and metrics["total_submissions"] == 2
    assert len(metrics["score_trajectory"]) == 2 and metrics["copy_model_count"] == 0
    assert metrics["final_private_score"] is not None and metrics["baseline_private_score"] is not None
    assert metrics["best_score"] >= max(p["score"] for p in metrics["score_trajectory"])
    revealed = grader.get("/scores")
    assert revealed["finalized"] and all("private_score" in s for s in revealed["submissions"])
    assert grader.submit(c).status_code == 409


def test_concurrent_submissions_recorded_exactly_once(grader_factory: Any) -> None:
    grader: GraderProcess = grader_factory("concurrent", eval={"limit": 8})
    grader.start()
    folders = [make_tiny_model(grader.workspace / f"m{i}", seed=100 + i, layers=1) for i in range(25)]
    paths = [folders[i % 25] for i in range(50)]  # each checkpoint submitted twice, at the same time

    def send(path: Path) -> httpx.Response:
        return grader.submit(path, timeout=600)

    with ThreadPoolExecutor(max_workers=10) as pool:
        responses = list(pool.map(send, paths))
    assert all(r.status_code == 200 for r in responses), [r.text for r in responses if r.status_code != 200]
    ids = [r.json()["submission_id"] for r in responses]
    assert len(set(ids)) == 50
    rows = grader.get("/scores")["submissions"]
    assert len(rows) == 50
    originals = [r for r in rows if r["duplicate_of"] is None]
    assert len(originals) == 25 and all(r["status"] == "done" for r in originals)
    assert {r["model_path"] for r in originals} == {str(p.resolve()) for p in folders}
    log = (grader.private_dir / "grader.log").read_text()
    assert log.count("evaluating submission") == 25  # each checkpoint evaluated once


def _wait_for_status(grader: GraderProcess, status: str, timeout: float = 120.0) -> dict[str, Any]:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for row in grader.get("/scores")["submissions"]:
            if row["status"] == status:
                return dict(row)
        time.sleep(0.05)
    raise TimeoutError(f"no submission reached {status!r}")


def test_kill_during_evaluation_then_restart(grader_factory: Any) -> None:
    grader: GraderProcess = grader_factory("crash", eval={"limit": 300, "batch_size": 8})
    grader.start()
    ckpt = make_tiny_model(grader.workspace / "victim", seed=7)
    with ThreadPoolExecutor(max_workers=1) as pool:
        pending = pool.submit(grader.submit, ckpt, 600.0)
        victim = _wait_for_status(grader, "evaluating")
        grader.kill9()
        with pytest.raises(httpx.HTTPError):
            pending.result()
    grader.start()
    row = _wait_for_status(grader, "done")
    assert row["submission_id"] == victim["submission_id"]
    rows = grader.get("/scores")["submissions"]
    assert len(rows) == 1  # nothing lost, nothing doubled
    retry = grader.submit(ckpt)  # the client retrying after the crash gets the same evaluation
    assert retry.status_code == 200 and retry.json()["duplicate_of"] == victim["submission_id"]
    log = (grader.private_dir / "grader.log").read_text()
    assert "re-queueing submission" in log
    assert (
        log.count("scoring the baseline") == 1 and "baseline found in the store" in log
    )  # cached, same config
    assert json.loads(grader.mirror.read_text()) == grader.get("/scores")
