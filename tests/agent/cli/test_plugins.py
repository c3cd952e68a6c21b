"""A plugin of each kind (sandbox backend, proposer, recipe), declared by a real distribution's entry points, is
selected by name from `rlloop run`: one new file and one registration each, no change to rlloop."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.status.runs import read_state

pytestmark = pytest.mark.slow

PLUGINS = Path(__file__).parents[1] / "fixtures" / "plugins"


def _env(home: Path, record: Path) -> dict[str, str]:
    path = os.pathsep.join(p for p in (str(PLUGINS), os.environ.get("PYTHONPATH", "")) if p)
    return {**os.environ, "RLLOOP_HOME": str(home), "PYTHONPATH": path, "RLLOOP_EXAMPLE_RECORD": str(record)}


def test_plugins_of_every_kind_are_chosen_by_name_from_rlloop_run(
    tmp_path: Path, tiny_model_home: Path
) -> None:
    record = tmp_path / "sandbox-record.jsonl"
    env = _env(tiny_model_home, record)
    listing = subprocess.run(
        [sys.executable, "-m", "trainers", "--list"], env=env, capture_output=True, text=True, timeout=120
    )
    assert "tiny_sft" in listing.stdout, listing.stdout + listing.stderr

    args = ["--sandbox", "recording", "--proposer", "scripted", "--recipes", "tiny_sft"]
    args += ["--loop-n", "1", "--trial-steps", "20", "--eval-limit", "100", "--timeout", "10m", "--quiet"]
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--run-id", "plugins-1", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]

    state = read_state(tiny_model_home / "runs" / "plugins-1")
    (trial,) = state["trials"]
    assert trial["status"] == "succeeded", trial
    assert trial["proposal"]["recipe"] == "tiny_sft"
    assert trial["proposal"]["hypothesis"].startswith("the plugin recipe tiny_sft")
    assert trial["sandbox"]["backend"] == "recording"
    assert trial["score"] is not None

    commands = [json.loads(line)["command"] for line in record.read_text().splitlines()]
    assert any("tiny_sft" in command for command in commands), commands


def test_an_unknown_plugin_name_is_refused_before_anything_starts(tmp_path: Path) -> None:
    home = tmp_path / "home"
    env = _env(home, tmp_path / "record.jsonl")
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--sandbox", "recordin", "--quiet"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    message = result.stdout + result.stderr
    assert "unknown sandbox 'recordin'" in message and "recording" in message
    assert not (home / "runs").exists() or not any((home / "runs").iterdir())
