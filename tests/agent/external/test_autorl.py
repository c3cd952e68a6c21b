"""AutoRL-Bench agents run unchanged: the dataset's own records in the workspace, AutoRL-Bench's dialect of the
grading API, the agent image, an AutoRL-Bench-style GRPO agent in Docker, and an agent that fails reported as such."""

from __future__ import annotations

import io
import json
import os
import shutil
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import httpx
import pytest
from rich.console import Console

from agent.external.agent_failure import diagnose
from agent.external.autorl import AutoRLAdapter, init_run_meta, read_run_meta
from agent.external.relay import TokenRelay
from agent.results.rows import read_results
from agent.run.workspace import RunPaths, prepare_workspace
from grader.benchmarks import get_benchmark
from grader.benchmarks.gsm8k import GSM8KBenchmark, find_data_dir
from sandbox.base import SandboxResult
from tasks.base import SourceRecords

AUTORL_AGENT = Path(__file__).parents[1] / "fixtures" / "autorl_agent"


def _gsm8k_folder(folder: Path, n: int = 520) -> Path:
    folder.mkdir(parents=True)
    rows = [
        {
            "question": f"Tom has {i} apples and buys 2 more. How many?",
            "answer": f"{i} + 2 = <<{i}+2={i + 2}>>{i + 2}\n#### {i + 2}",
        }
        for i in range(n)
    ]
    (folder / "train.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    return folder


def _lines(path: Path) -> list[dict[str, object]]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_workspace_holds_the_datasets_own_records_and_the_normalised_view(tmp_path: Path) -> None:
    bench = GSM8KBenchmark(data_dir=_gsm8k_folder(tmp_path / "gsm8k"))
    autorl = RunPaths(tmp_path / "home", "autorl")
    prepare_workspace(autorl, bench, layout="autorl-bench")
    own = _lines(autorl.data_dir / "train.jsonl")  # $DATA_PATH/train.jsonl, as AutoRL-Bench lays it out
    assert (
        own and set(own[0]) == {"question", "answer"} and str(own[0]["answer"]).rstrip().split()[-2] == "####"
    )
    normalised = _lines(autorl.data_dir / "rlloop" / "train.jsonl")
    assert set(normalised[0]) == {"id", "prompt", "answer"} and len(normalised) == len(own)
    assert [str(r["answer"]).split("#### ")[-1] for r in own] == [r["answer"] for r in normalised]
    assert len(_lines(autorl.data_dir / "valid.jsonl")) == len(bench.load("valid"))
    assert "run_meta.json" in (autorl.workspace / "instructions.md").read_text()
    assert "`question`, `answer`" in (autorl.workspace / "description.md").read_text()

    builtin = RunPaths(tmp_path / "home", "builtin")
    prepare_workspace(builtin, bench)  # rlloop's own trials keep the normalised view at data/
    assert _lines(builtin.data_dir / "train.jsonl") == normalised
    assert _lines(builtin.workspace / "dataset" / "train.jsonl") == own
    assert sorted(p.name for p in builtin.data_dir.iterdir()) == ["train.jsonl", "valid.jsonl"]
    assert not (builtin.workspace / "instructions.md").exists()


def test_every_builtin_benchmark_has_an_own_record_form() -> None:
    for name in ("arith", "countdown"):
        bench = get_benchmark(name)
        assert isinstance(bench, SourceRecords)
        records, samples = bench.source_records("valid"), bench.load("valid")
        assert len(records) == len(samples) and "id" not in records[0]
    countdown = get_benchmark("countdown").source_records("train")[0]
    assert set(countdown) == {"nums", "target", "solution"} and isinstance(countdown["nums"], list)
    if find_data_dir() is not None:
        raw = get_benchmark("gsm8k").source_records("train")
        assert len(raw) == 6973 and "#### " in raw[0]["answer"] and raw[0]["question"].startswith("Natalia")


class _Grader(BaseHTTPRequestHandler):
    """Answers as rlloop's grader does: absolute paths only, `detail` on refusals, its own /time fields."""

    seen: list[str] = []

    def _send(self, status: int, payload: dict[str, object]) -> None:
        body = json.dumps(payload).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_POST(self) -> None:  # noqa: N802
        path = json.loads(self.rfile.read(int(self.headers["Content-Length"])))["model_path"]
        self.seen.append(path)
        if not path.startswith("/"):
            self._send(422, {"detail": "model_path must be absolute"})
        elif path.endswith("bad"):
            self._send(400, {"detail": "checkpoint has no weights", "submission_id": 2})
        else:
            self._send(
                200, {"submission_id": 1, "score": 0.25, "baseline_score": 0.2, "total_submissions": 1}
            )

    def do_GET(self) -> None:  # noqa: N802
        if self.path == "/time":
            self._send(200, {"elapsed_seconds": 1.0, "started_at": 0.0, "finalized": False})
        else:
            self._send(200, {"status": "ok", "ready": True, "benchmark": "gsm8k"})

    def log_message(self, *args: object) -> None:
        return


def test_relay_speaks_autorl_bench(tmp_path: Path) -> None:
    """Relative model paths, run_meta.json and /time's budget fields, `error` on refusals, /health's fields."""
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Grader)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    workspace = tmp_path / "agent"  # the agent's folder on the host; it sees it at /workspace
    workspace.mkdir()
    meta_file = tmp_path / "agent-meta" / "run_meta.json"  # the host's file, read-only to the agent
    init_run_meta(meta_file, 600)
    relay = TokenRelay(
        f"http://127.0.0.1:{server.server_address[1]}",
        "t",
        adapter=AutoRLAdapter(workspace, "gsm8k", meta_file),
    )
    try:
        ok = httpx.post(f"{relay.url}/submit", json={"model_path": "output/v1"}, timeout=10)
        assert ok.status_code == 200 and _Grader.seen[-1] == str(workspace / "output" / "v1")
        inside = httpx.post(
            f"{relay.url}/submit", json={"model_path": "/workspace/output/v1/../v2"}, timeout=10
        )
        assert inside.status_code == 200 and _Grader.seen[-1] == str(workspace / "output" / "v2")
        body = ok.json()
        assert body["submission_id"] == 1 and body["score"] == 0.25 and body["model_path"] == "output/v1"
        assert isinstance(body["timestamp"], str)
        meta = read_run_meta(meta_file)
        assert set(meta) == {"start_time", "timeout_s", "last_submit_time", "end_time"}
        assert meta["timeout_s"] == 600 and isinstance(meta["last_submit_time"], int)
        timing = httpx.get(f"{relay.url}/time", timeout=10).json()
        assert (
            timing["timeout_s"] == 600 and 0 < timing["remaining"] <= 600 and timing["elapsed_seconds"] == 1.0
        )
        assert isinstance(timing["now"], int) and timing["last_submit_time"] == meta["last_submit_time"]
        refused = httpx.post(f"{relay.url}/submit", json={"model_path": "/x/bad"}, timeout=10)
        assert refused.status_code == 400 and refused.json()["error"] == "checkpoint has no weights"
        health = httpx.get(f"{relay.url}/health", timeout=10).json()
        assert health["task"] == "gsm8k" and health["workspace"] == "/workspace"  # never a host path
        assert health["available_gpus"] == []
        assert httpx.post(f"{relay.url}/set_baseline", json={"score": 1}, timeout=10).json()["error"]
    finally:
        relay.close()
        server.shutdown()


def _result(tmp_path: Path, log: str, **fields: object) -> tuple[SandboxResult, Path]:
    path = tmp_path / "log.txt"
    path.write_text(log)
    values: dict[str, object] = {"exit_code": 1, "log_path": path, "duration_s": 2.0, **fields}
    return SandboxResult.model_validate(values), path


def test_diagnose_names_the_line_that_says_what_failed(tmp_path: Path) -> None:
    traceback = (
        'task=gsm8k\nTraceback (most recent call last):\n  File "code/train.py", line 3, in <module>\n'
        "    import requests\nModuleNotFoundError: No module named 'requests'\n"
    )
    failure = diagnose(*_result(tmp_path, traceback))
    assert (
        failure is not None
        and failure.reason == "agent failed: ModuleNotFoundError: No module named 'requests'"
    )
    assert failure.tail[-1] == "ModuleNotFoundError: No module named 'requests'" and failure.exit_code == 1
    shell = diagnose(*_result(tmp_path, "start.sh: line 4: trainer: command not found\n", exit_code=127))
    assert shell is not None and shell.error == "start.sh: line 4: trainer: command not found"
    quiet = diagnose(*_result(tmp_path, "", exit_code=3))
    assert quiet is not None and quiet.error == "exit code 3"
    timed_out = diagnose(*_result(tmp_path, "step 9\n", exit_code=-9, timed_out=True))
    assert timed_out is not None and timed_out.error.startswith("timed out")
    assert diagnose(*_result(tmp_path, "done\n", exit_code=0)) is None


@pytest.mark.docker
def test_a_missing_agent_image_says_which_command_builds_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.external.agent_image import AgentImageMissingError, agent_sandbox
    from agent.run.config import RunConfig
    from agent.run.reporting import Reporter
    from sandbox import images
    from sandbox.status import docker_status

    if not docker_status().engine_reachable:
        pytest.skip("docker engine not reachable")
    monkeypatch.setattr(images, "AGENT_IMAGE", "rlloop/agent:never-built")
    config = RunConfig(home=tmp_path, benchmark="arith", base_model="tiny-arith", sandbox="docker")
    with pytest.raises(
        AgentImageMissingError, match=r"rlloop/agent:never-built.*`rlloop sandbox build --agent`"
    ):
        agent_sandbox(config, Reporter(None, quiet=True))
    from typer.testing import CliRunner

    from agent.sweeps.cli import app

    args = ["bench", "--agents", str(AUTORL_AGENT), "--sandbox", "docker", "--home", str(tmp_path)]
    refused = CliRunner().invoke(app, args)  # before any run starts, one line naming the command
    assert refused.exit_code == 2 and "rlloop sandbox build --agent" in " ".join(refused.output.split())
    assert not (tmp_path / "sweeps").exists()


def _sweep(home: Path, sweep_id: str, agent: Path, benchmark: str, sandbox: str) -> tuple[object, str]:
    from agent.sweeps.driver import run_sweep
    from agent.sweeps.report import write_report
    from agent.sweeps.spec import SweepSpec

    spec = SweepSpec(
        sweep_id=sweep_id,
        benchmarks=benchmark,
        base_models="tiny-arith",
        agents=[str(agent)],
        timeout=600,
        run_overrides={"eval_limit": 8, "sandbox": sandbox, "public_fraction": 0.0},
    )
    out = io.StringIO()
    manifest = run_sweep(spec, home, console=Console(file=out, width=250), refresh_s=0.5)
    write_report(home.resolve(), manifest)
    return manifest, out.getvalue()


@pytest.mark.docker
@pytest.mark.slow
def test_autorl_bench_style_grpo_agent_trains_and_submits_in_docker(tiny_model_home: Path) -> None:
    """The agent imports every AutoRL-Bench package, reads GSM8K's own fields from $DATA_PATH/train.jsonl, runs
    TRL's GRPOTrainer and submits with `requests`: in the agent image, with only the grader reachable."""
    from tests.sandbox.docker_support import require_docker

    require_docker()
    if find_data_dir() is None:
        pytest.skip("the shared GSM8K copy (../shared/data/gsm8k) is not on this machine")
    started = time.monotonic()
    manifest, console = _sweep(tiny_model_home, "autorl", AUTORL_AGENT, "gsm8k", "docker")
    (entry,) = manifest.entries.values()  # type: ignore[attr-defined]
    run_dir = tiny_model_home / "runs" / entry.run_id
    log = (run_dir / "trials" / "agent" / "log.txt").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["agent_exit_code"] == 0 and summary["success"] is True and not entry.agent_error, log[
        -3000:
    ]
    assert "read 8 records with fields ['question', 'answer']; first answer ends 'May.\\n#### 72'" in log
    assert "trained 2 GRPO steps" in log and "submitted:" in log
    grader = summary["grader"]
    assert grader["total_submissions"] >= 1 and grader["valid_submissions"] >= 1  # counted by the grader
    assert grader["copy_model_count"] == 0  # GRPO changed the weights
    timing = json.loads(log.split("time: ", 1)[1].splitlines()[0])
    assert timing["timeout_s"] > 0 and timing["remaining"] is not None
    assert (run_dir / "agent" / "code" / "train.py").is_file()  # start.sh wrote its code under ./code
    assert read_run_meta(run_dir / "agent-meta" / "run_meta.json")["end_time"] is not None
    print(f"autorl agent sweep: {time.monotonic() - started:.0f}s")  # noqa: T201 - the figure CI logs show


@pytest.mark.slow
def test_an_agent_that_fails_on_import_is_reported_failed_with_its_error(
    tiny_model_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from mlflow import MlflowClient

    from agent.external.driver import AGENT_ERROR_TAG

    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    agent = tmp_path / "broken_agent"
    shutil.copytree(AUTORL_AGENT, agent)
    train = agent / "train.py"
    train.write_text("import autorl_missing_package  # noqa\n" + train.read_text())
    manifest, console = _sweep(tiny_model_home, "broken", agent, "arith", "local")
    (entry,) = manifest.entries.values()  # type: ignore[attr-defined]
    error = "ModuleNotFoundError: No module named 'autorl_missing_package'"
    assert entry.status == "finished" and entry.agent_error == error
    assert f"agent failed: {error}" in console  # the driver's line, and the table's status cell
    assert "| ModuleNotFoundError" in console and "| Traceback (most recent call last):" in console
    summary = json.loads((tiny_model_home / "runs" / entry.run_id / "summary.json").read_text())
    assert summary["success"] is False and summary["stop_reason"] == f"agent failed: {error}"
    assert summary["agent_error"] == error and summary["agent_exit_code"] == 1
    (row,) = [r for r in read_results(tiny_model_home / "results.csv") if r["run_id"] == entry.run_id]
    assert row["success"] == "False" and row["submissions"] == "0" and row["error"] == error
    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_model_home.resolve() / 'mlflow.db'}")
    tags = client.get_run(entry.mlflow_parent).data.tags
    assert (
        tags[AGENT_ERROR_TAG] == f"agent failed: {error}"
        and tags["rlloop.stop_reason"] == tags[AGENT_ERROR_TAG]
    )
    report = (tiny_model_home / "sweeps" / "broken" / "report.md").read_text()
    assert f"{entry.run_id}: agent failed: {error}" in report
