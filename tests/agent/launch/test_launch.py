"""`python -m agent.launch FILE`: the service's workers start a run as `rlloop run` does, from a config validated
once (its dump, not flags): the same exit code and the same one-line `error:` the service shows."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from typer.testing import CliRunner

import agent.cli.commands as commands
from agent.launch import LaunchRequest
from agent.run import RunConfig


def _launch(request_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.launch", str(request_file)],
        capture_output=True,
        text=True,
        timeout=300,
    )


def test_a_run_that_cannot_start_ends_as_rlloop_run_ends(tmp_path: Path) -> None:
    home, folder = tmp_path / "home", tmp_path / "not-a-model"
    folder.mkdir()
    config = RunConfig(home=home, base_model=str(folder), run_id="no-model", loop_n=1)
    request_file = tmp_path / "request.json"
    request_file.write_text(LaunchRequest(config=config).model_dump_json())

    child = _launch(request_file)
    cli = CliRunner().invoke(
        commands.app,
        [
            "run",
            "--home",
            str(home),
            "--base-model",
            str(folder),
            "--run-id",
            "no-model-cli",
            "--loop-n",
            "1",
        ],
        env={"COLUMNS": "2000"},
    )

    assert child.returncode == cli.exit_code == 2, child.stderr
    (line,) = [x for x in child.stderr.splitlines() if x.startswith("error:")]
    assert "is not a Hugging Face checkpoint" in line
    assert " ".join(line.split()) in " ".join(cli.output.split())


def test_an_unreadable_request_is_one_error_line(tmp_path: Path) -> None:
    request_file = tmp_path / "request.json"
    request_file.write_text('{"config": {"loop_n": 0}}')
    child = _launch(request_file)
    assert child.returncode == 2
    assert child.stderr.startswith(f"error: cannot read the run request {request_file}")
