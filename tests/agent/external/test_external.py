"""External AutoRL-Bench-style agents: the folder contract, the token relay, and whole runs against a real grader."""

from __future__ import annotations

import json
import os
import shutil
import sys
from pathlib import Path

import httpx
import pytest

from agent.external.agent_folder import ExternalAgentError, load_agent
from agent.external.driver import agent_grader, run_external
from agent.external.relay import TokenRelay
from agent.results.rows import read_results
from agent.run.config import RunConfig
from agent.run.workspace import RunPaths

FIXTURE = Path(__file__).parents[1] / "fixtures" / "example_agent"


def test_load_agent_reads_autorl_bench_config() -> None:
    spec = load_agent(FIXTURE)
    assert spec.name == "Example Agent"
    assert spec.start_script == FIXTURE.resolve() / "start.sh"
    assert spec.env_vars == {"EXAMPLE_GREETING": "hello from config.yaml"}


def test_load_agent_rejects_bad_folders(tmp_path: Path) -> None:
    with pytest.raises(ExternalAgentError, match="no config.yaml"):
        load_agent(tmp_path)
    (tmp_path / "config.yaml").write_text("name: x\nstart: ../escape.sh\n")
    with pytest.raises(ExternalAgentError, match="not a file inside"):
        load_agent(tmp_path)
    (tmp_path / "config.yaml").write_text("start: start.sh\n")
    with pytest.raises(ExternalAgentError, match="name"):
        load_agent(tmp_path)


def test_token_relay_adds_the_token_and_refuses_finalize() -> None:
    """A real upstream HTTP server that insists on the token; the relay's callers never send it."""
    import threading
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

    seen: list[str] = []

    class Upstream(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802
            seen.append(f"{self.path} {self.headers.get('Authorization')}")
            ok = self.headers.get("Authorization") == "Bearer s3cret-token"
            body = json.dumps({"ok": ok}).encode()
            self.send_response(200 if ok else 401)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    relay = TokenRelay(f"http://127.0.0.1:{server.server_address[1]}", "s3cret-token")
    try:
        answer = httpx.post(f"{relay.url}/submit", json={"model_path": "/x"}, timeout=10)
        assert answer.status_code == 200 and answer.json() == {"ok": True}
        refused = httpx.post(f"{relay.url}/finalize", timeout=10)
        assert refused.status_code == 403
        assert seen == ["/submit Bearer s3cret-token"]  # /finalize never reached the grader
    finally:
        relay.close()
        server.shutdown()


def test_the_agents_grader_is_configured_as_a_research_runs(tmp_path: Path) -> None:
    """The one grader builder: an external agent on a chat run is graded with the run's chat prompts."""
    config = RunConfig(
        home=tmp_path, prompt_format="chat", system_prompt="Be brief.", public_fraction=0.25, eval_limit=8
    )
    paths = RunPaths(tmp_path, "ext-chat")
    agent_grader(config, paths, tmp_path / "base", "namespaces")
    written = json.loads((paths.grader_dir / "config.json").read_text())
    assert written["eval"]["prompt_style"] == "chat" and written["eval"]["system_prompt"] == "Be brief."
    assert written["eval"]["limit"] == 8 and written["public_fraction"] == 0.25
    assert written["isolation"] == "namespaces" and written["max_submissions"] is None
    plain = RunConfig(home=tmp_path)
    agent_grader(plain, RunPaths(tmp_path, "ext-plain"), tmp_path / "base", "namespaces")
    eval_config = json.loads((RunPaths(tmp_path, "ext-plain").grader_dir / "config.json").read_text())["eval"]
    assert "prompt_style" not in eval_config and "system_prompt" not in eval_config


def _config(home: Path, sandbox: str, run_id: str) -> RunConfig:
    return RunConfig(
        home=home,
        benchmark="arith",
        base_model="tiny-arith",
        sandbox=sandbox,
        eval_limit=40,
        timeout=300,
        run_id=run_id,
        quiet=True,
        public_fraction=0.0,
    )


def _check_run(home: Path, run_id: str, summary: dict[str, object]) -> None:
    assert summary["status"] == "finished" and summary["agent_exit_code"] == 0 and summary["success"] is True
    grader = summary["grader"]
    assert isinstance(grader, dict)
    assert grader["total_submissions"] == 1  # read back from the grader, not from the agent
    assert grader["copy_model_count"] == 1  # it submitted the base model unchanged
    assert grader["valid_submission_rate"] == 1.0
    log = (home / "runs" / run_id / "trials" / "agent" / "log.txt").read_text()
    assert "greeting=hello from config.yaml" in log
    assert "finalize: refused 403" in log
    token = json.loads((home / "runs" / run_id / "grader" / "config.json").read_text())["token"]
    agent_env = json.loads((home / "runs" / run_id / "agent" / "agent_env.json").read_text())
    assert token not in agent_env.values()  # the relay holds the token; the agent never sees it
    rows = [r for r in read_results(home / "results.csv") if r["run_id"] == run_id]
    assert rows and rows[0]["agent"] == "Example Agent" and rows[0]["submissions"] == "1"
    assert json.loads((home / "runs" / run_id / "summary.json").read_text())["proposer"] == "external"


@pytest.mark.slow
def test_external_agent_runs_unchanged_in_the_local_sandbox(
    tiny_model_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    summary = run_external(_config(tiny_model_home, "local", "ext-local"), FIXTURE)
    _check_run(tiny_model_home, "ext-local", summary)


@pytest.mark.slow
def test_failing_agent_exit_code_is_its_success_flag(
    tiny_model_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    agent = tmp_path / "failing_agent"
    shutil.copytree(FIXTURE, agent)
    (agent / "config.yaml").write_text(
        'name: failing\nstart: start.sh\nenv_vars:\n  EXAMPLE_EXIT_CODE: "3"\n  EXAMPLE_GREETING: hi\n'
    )
    summary = run_external(_config(tiny_model_home, "local", "ext-fail"), agent)
    assert summary["agent_exit_code"] == 3 and summary["success"] is False
    assert summary["grader"]["total_submissions"] == 1  # its submission still counts


@pytest.mark.docker
@pytest.mark.slow
def test_external_agent_runs_unchanged_in_docker_with_only_the_grader_reachable(
    tiny_model_home: Path,
) -> None:
    from tests.sandbox.docker_support import require_docker

    require_docker()
    summary = run_external(_config(tiny_model_home, "docker", "ext-docker"), FIXTURE)
    _check_run(tiny_model_home, "ext-docker", summary)
