"""The issue's done-when line through the real CLI: `rlloop run --base-model tiny-chat --benchmark gsm8k
--prompt-format chat --loop-n 2` completes, with trials trained and scored in the chat format; killed with SIGKILL
at its second trial, it resumes in the chat format; and a sweep runs on tiny-chat."""

from __future__ import annotations

import io
import json
import shutil
import signal
from pathlib import Path

import pytest
from rich.console import Console

from agent.status.runs import read_state
from agent.sweeps.spec import SweepSpec
from tests.agent.loop.test_resume import _run

pytestmark = pytest.mark.slow


def test_tiny_chat_on_gsm8k_in_the_chat_format_end_to_end(tmp_path: Path, tiny_chat_dir: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(
        tiny_chat_dir, home / "models" / "tiny-chat"
    )  # built once per session (built-in on first use)
    args = [
        "run",
        "--base-model",
        "tiny-chat",
        "--benchmark",
        "gsm8k",
        "--prompt-format",
        "chat",
        "--system-prompt",
        "Solve the problem.",
        "--loop-n",
        "2",
        "--recipes",
        "sft",
        "--trial-steps",
        "2",
        "--eval-limit",
        "8",
        "--valid-limit",
        "16",  # validation generates up to 256 tokens a sample: 500 samples took over 2 minutes a checkpoint
        "--sandbox",
        "local",
        "--submit",
        "all",
        "--timeout",
        "15m",
        "--run-id",
        "chat-e2e",
        "--quiet",
    ]
    crashed = _run(home, *args, RLLOOP_FAILPOINT="run_trial:2")  # SIGKILL while the second trial trains
    assert crashed.returncode == -signal.SIGKILL, crashed.stdout[-3000:] + crashed.stderr[-3000:]
    run_dir = home / "runs" / "chat-e2e"
    assert read_state(run_dir).get("status") != "finished"
    result = _run(home, "resume", "chat-e2e")
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    state = read_state(run_dir)
    assert state["status"] == "finished" and len(state["trials"]) == 2
    succeeded = [t for t in state["trials"] if t["status"] == "succeeded"]
    assert succeeded, state["trials"]
    assert state["baseline_score"] is not None and state["submissions"] == len(succeeded)
    assert (
        json.loads((run_dir / "trials" / "base" / "validation.json").read_text())["n"] == 16
    )  # --valid-limit
    grader = json.loads((run_dir / "grader" / "config.json").read_text())
    assert (
        grader["eval"]["prompt_style"] == "chat" and grader["eval"]["system_prompt"] == "Solve the problem."
    )
    for trial in succeeded:  # the trial trained on the prompts the grader scores
        config = json.loads((run_dir / "trials" / trial["trial_id"] / "config.json").read_text())
        assert (config["prompt_format"], config["system_prompt"]) == ("chat", "Solve the problem.")
        assert config["benchmark"] == "gsm8k"


def test_a_sweep_runs_on_tiny_chat_in_the_chat_format(tmp_path: Path, tiny_chat_dir: Path) -> None:
    from agent.sweeps.driver import run_sweep

    home = tmp_path / "home"
    shutil.copytree(tiny_chat_dir, home / "models" / "tiny-chat")
    spec = SweepSpec.model_validate(
        {
            "sweep_id": "sw-chat",
            "benchmarks": "arith",
            "base_models": "tiny-chat",
            "agents": "builtin",
            "seeds": 1,
            "timeout": 600,
            "loop_n": 1,
            "run_overrides": {
                "eval_limit": 16,
                "sandbox": "local",
                "trial_timeout": 240,
                "public_fraction": 0.0,
                "trial_steps": 2,
                "prompt_format": "chat",
            },
        }
    )
    manifest = run_sweep(spec, home, console=Console(file=io.StringIO()), refresh_s=0.5)
    assert manifest.status == "finished", manifest.model_dump_json(indent=1)
    (entry,) = manifest.entries.values()
    assert entry.baseline is not None
    grader = json.loads((home / "runs" / entry.run_id / "grader" / "config.json").read_text())
    assert grader["eval"]["prompt_style"] == "chat"
