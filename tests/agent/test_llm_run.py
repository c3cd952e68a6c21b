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

from agent.results import read_results
from agent.status import read_state
from tests.support.openai_server import ScriptedOpenAIServer, reply

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
        result = _run(tiny_model_home, server.base_url, "--run-id", "llm-repair")
        requests = server.chat_requests()
    assert result.returncode == 0, result.stdout + result.stderr
    assert len(requests) == 2
    assert "NameError" in requests[1].text()  # the smoke run's traceback went back to the model
    state = read_state(tiny_model_home / "runs" / "llm-repair")
    (trial,) = state["trials"]
    assert trial["status"] == "succeeded"
    assert "output_dir)" not in trial["proposal"]["train_py"]  # the repaired code is what ran
    assert trial["grading"]["is_copy"] is True  # a copy of the base model is flagged by the grader
    trial_dir = tiny_model_home / "runs" / "llm-repair" / "workspace" / "trials" / "t01"
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
