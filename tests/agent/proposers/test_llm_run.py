"""The LLM proposer inside a real run: code checked by a smoke run and repaired, and a dead endpoint ending cleanly.

The driver model is an OpenAI-compatible server started by the test (the real wire protocol, scripted answers); the
run is the real CLI in a subprocess, with the grader, the sandbox and MLflow as in production.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from agent.results.rows import read_results
from agent.status.runs import read_state
from tests.support.openai_server import ScriptedOpenAIServer, call, reply, tool_calls

pytestmark = pytest.mark.slow

ARGS = ["--loop-n", "1", "--eval-limit", "60", "--public-fraction", "0", "--sandbox", "local", "--quiet"]

FIXED = """
import os
from transformers import AutoModelForCausalLM, AutoTokenizer

model = AutoModelForCausalLM.from_pretrained(os.environ["MODEL_PATH"])
tokenizer = AutoTokenizer.from_pretrained(os.environ["MODEL_PATH"])
model.save_pretrained(os.environ["OUTPUT_DIR"])
tokenizer.save_pretrained(os.environ["OUTPUT_DIR"])
print("saved", "smoke" if os.environ.get("RLLOOP_SMOKE") else "full")
"""
BUGGY = FIXED.replace('model.save_pretrained(os.environ["OUTPUT_DIR"])', "model.save_pretrained(output_dir)")


def _proposal(code: str) -> str:
    return json.dumps(
        {
            "hypothesis": "a plain copy of the base model is a sane first checkpoint",
            "rationale": "test",
            "recipe": "sft",
            "hyperparameters": {},
            "train_py": code,
        }
    )


def _run(
    home: Path,
    base_url: str,
    *args: str,
    command: tuple[str, ...] = ("run", "--driver-model", "test-model", *ARGS),
    **extra: str,
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "RLLOOP_FAILPOINT"}
    env |= {"RLLOOP_HOME": str(home), "OPENAI_BASE_URL": base_url, "OPENAI_API_KEY": "sk-test", **extra}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *command, *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_buggy_code_is_caught_by_the_smoke_run_and_repaired(tiny_model_home: Path) -> None:
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        server.enqueue(reply(_proposal(BUGGY)), reply(_proposal(FIXED)))
        # --submit all: the copy is graded (and flagged) although validation says it is no better
        result = _run(tiny_model_home, server.base_url, "--run-id", "llm-repair", "--submit", "all")
        requests = server.chat_requests()
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(requests) == 2
    assert "NameError" in requests[1].text()  # the smoke run's traceback went back to the model
    state = read_state(tiny_model_home / "runs" / "llm-repair")
    (trial,) = state["trials"]
    assert trial["status"] == "succeeded"
    assert "output_dir)" not in trial["proposal"]["train_py"]  # the repaired code is what ran
    assert trial["grading"]["is_copy"] is True  # a copy of the base model is flagged by the grader
    trial_dir = tiny_model_home / "runs" / "llm-repair" / "trials" / "t01"
    assert "saved full" in (trial_dir / "log.txt").read_text()


def test_dead_endpoint_ends_the_run_with_a_clear_line_and_a_results_row(tiny_model_home: Path) -> None:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]  # nothing listens here once the socket closes
    result = _run(tiny_model_home, f"http://127.0.0.1:{port}/v1", "--run-id", "llm-dead")
    assert result.returncode == 1, result.stdout + result.stderr
    assert "Traceback" not in result.stderr
    assert "proposer unavailable" in result.stderr
    rows = [r for r in read_results(tiny_model_home / "results.csv") if r["run_id"] == "llm-dead"]
    assert len(rows) == 1 and rows[0]["success"] == "False" and rows[0]["agent"] == "rlloop-llm"
    assert read_state(tiny_model_home / "runs" / "llm-dead")["status"] == "failed"


def test_llm_spend_survives_a_crash_and_resume(tiny_model_home: Path) -> None:
    """Tokens spent before a kill -9 still count after `rlloop resume`: no second call past the budget."""
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        server.enqueue(
            reply(_proposal(FIXED), prompt_tokens=900, completion_tokens=300), reply(_proposal(FIXED))
        )
        crashed = _run(
            tiny_model_home,
            server.base_url,
            "--run-id",
            "llm-ledger",
            "--llm-max-tokens",
            "1000",
            "--loop-n",
            "2",
            RLLOOP_FAILPOINT="run_trial:1",  # killed after the first proposal was paid for
        )
        assert crashed.returncode == -9, crashed.stdout + crashed.stderr
        run_dir = tiny_model_home / "runs" / "llm-ledger"
        assert json.loads((run_dir / "budget.json").read_text())["tokens"] == 1200
        resumed = _run(tiny_model_home, server.base_url, command=("resume", "llm-ledger"))
        requests = server.chat_requests()
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    assert len(requests) == 1  # the resumed run knew the budget was spent and asked no more
    state = read_state(run_dir)
    assert [t["status"] for t in state["trials"]] == ["succeeded"]
    assert state["stop_reason"] == "budget spent: LLM tokens 1200 reached the budget of 1000"


TOOL_SCRIPT = "import os\nprint(sorted(os.listdir(os.environ['DATA_PATH'])))\n"


def test_the_llm_looks_before_it_proposes_and_the_next_run_remembers(tiny_model_home: Path) -> None:
    """Run 1: the model calls each tool (two of them fail: no trial yet), then proposes; the calls are in the
    trial's proposal_tools.jsonl, the run log and the MLflow traces of its trial run. Run 2 (--memory) is told
    what run 1 learned."""
    from mlflow import MlflowClient

    from agent.tracking.tracker import EXPERIMENT_KIND_TAG, TRIAL_TAG

    looks = [
        call("data_rows", {"split": "valid", "limit": 2}),
        call("split_stats", {}),
        call("validation_results", {"trial_id": "t01"}),
        call("trial_log", {"trial_id": "t01"}),
        call("recipe_source", {"recipe": "sft"}),
        call("run_script", {"code": TOOL_SCRIPT, "timeout_s": 60}),
    ]
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        server.enqueue(tool_calls(*looks), reply(_proposal(FIXED)))
        first = _run(tiny_model_home, server.base_url, "--run-id", "llm-tools", "--memory")
        requests = server.chat_requests()
    assert first.returncode == 0, first.stdout + first.stderr
    assert len(requests) == 2 and sorted(requests[0].tool_names) == sorted(
        c["function"]["name"] for c in looks
    )
    answers = [m["content"] for m in requests[1].messages if m["role"] == "tool"]
    assert "valid.jsonl rows 0..1" in answers[0] and "train:" in answers[1]
    assert answers[2].startswith("error: trial t01 has no validation results")
    assert answers[3].startswith("error: trial t01 has no log yet")
    assert "exit 0" in answers[5] and "train.jsonl" in answers[5] and "valid.jsonl" in answers[5]

    run_dir = tiny_model_home / "runs" / "llm-tools"
    trial_dir = run_dir / "trials" / "t01"
    logged = [json.loads(line) for line in (trial_dir / "proposal_tools.jsonl").read_text().splitlines()]
    assert [(r["name"], r["ok"]) for r in logged] == [
        ("data_rows", True),
        ("split_stats", True),
        ("validation_results", False),
        ("trial_log", False),
        ("recipe_source", True),
        ("run_script", True),
    ]
    run_log = (run_dir / "run.log").read_text()
    assert "tool data_rows(split='valid', limit=2): 2 valid rows" in run_log
    assert "tool run_script(" in run_log and "t01-script1: exit 0" in run_log
    assert read_state(run_dir)["trials"][0]["status"] == "succeeded"

    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_model_home / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("rlloop/arith")
    assert experiment is not None and experiment.tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    (trial_run,) = client.search_runs(
        [experiment.experiment_id],
        filter_string=f"tags.`{TRIAL_TAG}` = 't01' and tags.`rlloop.run_id` = 'llm-tools'",
    )
    traces = client.search_traces(locations=[experiment.experiment_id], run_id=trial_run.info.run_id)
    nodes = {t.info.tags["rlloop.node"]: t for t in traces}
    assert {"propose", "run_trial", "record"} <= nodes.keys()
    spans = [s.name for s in nodes["propose"].data.spans]
    assert spans.count("llm:propose") == 2 and [s for s in spans if s.startswith("tool:")] == [
        f"tool:{r['name']}" for r in logged
    ]
    assert "proposal_tools.jsonl" in [a.path for a in client.list_artifacts(trial_run.info.run_id)]

    memory_files = list((tiny_model_home / "memory").glob("arith__tiny-arith*.json"))
    assert len(memory_files) == 1
    with ScriptedOpenAIServer(models=["test-model"]) as server:
        server.enqueue(reply(_proposal(FIXED)))
        second = _run(
            tiny_model_home,
            server.base_url,
            "--run-id",
            "llm-remembers",
            "--memory",
            "--llm-max-tool-calls",
            "0",
        )
        (asked,) = server.chat_requests()
    assert second.returncode == 0, second.stdout + second.stderr
    prompt = asked.messages[1]["content"]
    assert "# Lessons from earlier runs on this benchmark and base model (memory)" in prompt
    assert "1 trials over 1 earlier run(s) of arith on tiny-arith" in prompt
    assert "sft (custom train.py) ->" in prompt and "[llm-tools/t01," in prompt
    assert "tools" not in asked.body  # --llm-max-tool-calls 0
    lessons = json.loads(memory_files[0].read_text())["lessons"]
    assert [(x["run_id"], x["trial_id"]) for x in lessons] == [("llm-tools", "t01"), ("llm-remembers", "t01")]
