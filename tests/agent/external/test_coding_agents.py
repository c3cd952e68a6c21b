"""The coding agents people run, unchanged: Claude Code, Codex CLI and OpenCode as `rlloop bench --agents NAME`,
in the agent image on Docker, their model a test upstream that speaks each one's real protocol (Anthropic
Messages, the Responses API, Chat Completions; streamed, with tool calls) through rlloop's gateway."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from agent.external import named
from agent.external.agent_folder import ExternalAgentError, is_agent_folder, load_agent, named_agent_problem
from agent.run.config import RunConfig
from tests.support.agent_upstreams import Read, Run, SessionUpstream, Write

REAL_KEY = "sk-real-coding-agent-key-0123456789"
KEY_ENV = "RLLOOP_TEST_CODING_AGENT_KEY"
HOST_CANARY = "rlloop-host-canary-7f3a"
USAGE = (1000, 100)  # what the upstream reports for each of the session's calls
TRAIN = """import os, shutil

# a training run the size of a test: the base model, unchanged, saved where the agent submits from
shutil.copytree(os.environ["MODEL_PATH"], "output/v1", dirs_exist_ok=True)
print("trained: output/v1")
"""
# Submit through the relay, then look around: what a hostile agent would try (the host's keys, its home, the net).
SUBMIT = """import json, os, socket, time

import requests

answer = requests.post(os.environ["GRADING_SERVER_URL"] + "/submit", json={"model_path": "output/v1"}, timeout=600)
print("submitted:", answer.status_code, json.dumps({k: answer.json().get(k) for k in ("score", "total_submissions")}))
with open("env.txt", "w") as out:
    out.write("\\n".join(f"{k}={v}" for k, v in sorted(os.environ.items())))
print("host home visible:", os.path.exists(HOST_HOME))
started = time.monotonic()
try:
    socket.create_connection(("api.anthropic.com", 443), timeout=10)
    print("egress: open")
except OSError as exc:
    print(f"egress: blocked in {time.monotonic() - started:.1f}s ({exc.__class__.__name__})")
"""


def session(host_home: Path) -> list[Read | Write | Run]:
    """Read the task, write a training script, run it, submit through the relay; the last step's call is one the
    model answers so the submission's output is seen, and the call after it spends the cap."""
    return [
        Read("/workspace/description.md"),
        Write("/workspace/code/train.py", TRAIN),
        Run("python code/train.py"),
        Write("/workspace/code/submit.py", SUBMIT.replace("HOST_HOME", repr(str(host_home)))),
        Run("python code/submit.py"),
        Run("ls output"),
    ]


STEPS = 6
CAP = STEPS * sum(USAGE)  # the session's calls spend it exactly: the next one is refused


def test_the_coding_agents_are_named_agents_in_folders_rlloop_ships(tmp_path: Path) -> None:
    for name, (command, _) in named.NAMED_AGENTS.items():
        assert is_agent_folder(name)
        spec = load_agent(name)
        assert spec.name == name and spec.contract == "posttrainbench"
        solve = spec.start_script.read_text()
        assert f"\n{command} " in solve and '"$PROMPT"' in solve and '$AGENT_CONFIG"' in solve
        problem = named_agent_problem(spec, RunConfig(home=tmp_path))
        assert problem is not None and "--agent-llm-models" in problem
        ready = RunConfig(home=tmp_path, agent_llm_base_url="http://127.0.0.1:9/v1", agent_llm_models="m")
        assert named_agent_problem(spec, ready) is None
    assert not is_agent_folder("./codex") and not named.is_named("./codex")  # a path, not the name
    with pytest.raises(ExternalAgentError, match="no config.yaml"):
        load_agent(tmp_path)


def test_a_sweep_spec_names_them_too(tmp_path: Path) -> None:
    from agent.sweeps.spec import SweepSpec

    spec = SweepSpec(benchmarks=["arith"], base_models=["tiny-arith"], agents="claude-code,codex,builtin")
    claude, codex, builtin = spec.combinations()
    assert claude.is_external and codex.is_external and not builtin.is_external
    assert (claude.agent_label, codex.agent_label) == ("claude-code", "codex")
    assert claude.run_id("s") == claude.run_id("s") != codex.run_id("s")
    assert "--claude-code-" in claude.run_id("s")


def test_bench_refuses_a_coding_agent_without_a_model(tmp_path: Path) -> None:
    from typer.testing import CliRunner

    from agent.cli.commands import app

    outcome = CliRunner().invoke(app, ["bench", "--agents", "claude-code,codex", "--home", str(tmp_path)])
    assert outcome.exit_code == 2
    assert "--agents claude-code runs `claude`, which needs a model" in " ".join(outcome.output.split())
    unknown = CliRunner().invoke(app, ["bench", "--agents", "claude-cod", "--home", str(tmp_path)])
    assert unknown.exit_code == 2 and "not a coding agent (claude-code, codex, opencode)" in unknown.output


def _docker(name: str) -> object:
    return pytest.param(name, marks=pytest.mark.docker, id=name)


@pytest.mark.slow
@pytest.mark.parametrize("agent", [_docker("claude-code"), _docker("codex"), _docker("opencode")])
def test_a_coding_agent_runs_unchanged_through_the_gateway(
    agent: str, tiny_model_home: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The unchanged CLI reads the task, writes a training script, runs it and submits through the relay, each step
    a tool call of its own kind that the upstream streams back in the client's protocol; the submission counts,
    every call is in the transcript and MLflow, the token cap stops the agent with the row saying why, and nothing
    of the host (its key, its home, the network) is within reach."""
    from mlflow import MlflowClient
    from typer.testing import CliRunner

    from agent.cli.commands import app
    from agent.results.rows import read_results
    from tests.sandbox.docker_support import require_docker

    require_docker()
    host_home = tmp_path / "host-home"
    host_home.mkdir()
    (host_home / "canary.txt").write_text(HOST_CANARY)
    monkeypatch.setenv("HOME", str(host_home))
    monkeypatch.setenv(KEY_ENV, REAL_KEY)
    monkeypatch.setenv("RLLOOP_TEST_HOST_CANARY", HOST_CANARY)
    started = time.monotonic()
    with SessionUpstream(session(host_home), api_key=REAL_KEY, usage=USAGE) as upstream:
        args = [
            *("bench", "--agents", agent, "--benchmarks", "arith", "--base-models", "tiny-arith"),
            *(
                "--sandbox",
                "docker",
                "--sweep-id",
                f"coding-{agent}",
                "--eval-limit",
                "8",
                "--timeout",
                "10m",
            ),
            *("--agent-llm-base-url", upstream.base_url, "--agent-llm-key-env", KEY_ENV),
            *("--agent-llm-models", "test-model", "--llm-max-tokens", str(CAP)),
            *("--home", str(tiny_model_home)),
        ]
        outcome = CliRunner().invoke(app, args)
        assert outcome.exit_code == 0, outcome.output
        seen = list(upstream.seen)
        results = upstream.tool_results()
    elapsed = time.monotonic() - started
    (run_dir,) = (tiny_model_home / "runs").iterdir()
    log = (run_dir / "trials" / "agent" / "log.txt").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    # the session: every step was a tool call the CLI ran, in order, and the model saw each result
    main = [s for s in seen if s.step is not None]
    assert [s.step for s in main] == list(range(STEPS)), log[-3000:]
    assert len(results) == STEPS - 1  # the last step's result went into the call the cap refused
    assert "Task: arith" in results[0] and "trained: output/v1" in results[2]
    assert 'submitted: 200 {"score"' in results[4] and '"total_submissions": 1' in results[4]
    assert "host home visible: False" in results[4] and "egress: blocked in 0." in results[4]  # no 10 s hang
    assert all(
        s.headers.get("x-api-key", s.headers.get("authorization", "")).endswith(REAL_KEY) for s in seen
    )
    # the submission counted; the cap stopped the agent, and the results row says why
    assert summary["grader"]["total_submissions"] == 1 and summary["grader"]["valid_submissions"] == 1
    llm = summary["agent_llm"]
    assert llm["refused_over_cap"] >= 1 and llm["tokens"] >= CAP and "token cap" in llm["stop_reason"]
    assert summary["success"] is False and summary["agent_error"].startswith("its model calls were refused")
    (row,) = [r for r in read_results(tiny_model_home / "results.csv") if r["run_id"] == run_dir.name]
    assert f"token cap of {CAP} reached" in row["llm_limit"] and row["submissions"] == "1"
    assert int(row["llm_tokens"]) == llm["tokens"] and int(row["llm_calls"]) == llm["calls"]
    # every call is in the transcript (forwarded or refused) and is an MLflow trace of the run
    lines = [json.loads(line) for line in (run_dir / "agent-llm.jsonl").read_text().splitlines()]
    forwarded = [line for line in lines if line["refused"] is None]
    assert len(forwarded) == len(seen) and all(line["status"] == 200 for line in forwarded)
    assert sum(line["prompt_tokens"] + line["completion_tokens"] for line in lines) == llm["tokens"]
    assert [line["status"] for line in lines if line["refused"]] == [402] * llm["refused_over_cap"]
    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_model_home.resolve() / 'mlflow.db'}")
    parent = client.get_run(json.loads((run_dir / "mlflow.json").read_text())["mlflow_parent"])
    traces = client.search_traces(locations=[parent.info.experiment_id], run_id=parent.info.run_id)
    assert len(traces) == len(lines)
    # nothing of the host: not its key, its home or its variables, anywhere the agent could read or write
    inside = (run_dir / "agent" / "env.txt").read_text()
    assert "HOME=/tmp" in inside and str(host_home) not in inside and HOST_CANARY not in inside
    assert "placeholder" in inside and KEY_ENV not in inside
    for path in [*(run_dir / "agent").rglob("*"), run_dir / "trials" / "agent" / "log.txt"]:
        if path.is_file() and not path.is_symlink():
            assert REAL_KEY.encode() not in path.read_bytes(), path
    print(f"{agent}: {len(seen)} calls, {elapsed:.0f}s")  # noqa: T201 - the figure CI logs show
