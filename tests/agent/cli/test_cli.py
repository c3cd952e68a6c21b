"""`rlloop` names what its registries hold: `--sandbox` / `--proposer` help lists the registered names, and
`rlloop sandbox list` shows every backend `--sandbox` accepts, plugins included, and plugins that failed to load."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from typer.testing import CliRunner

from agent.cli.commands import app
from agent.proposers import PROPOSERS
from sandbox.registry import SANDBOXES

ROOT = Path(__file__).resolve().parents[3]


@pytest.fixture()
def plugin_sandbox() -> Iterator[str]:
    SANDBOXES.register("test-plugin-box", lambda **opts: None, origin="tests.agent.cli.test_cli")  # type: ignore[arg-type,return-value]
    yield "test-plugin-box"
    SANDBOXES.unregister("test-plugin-box")


def test_run_help_lists_the_registered_sandboxes_and_proposers() -> None:
    result = CliRunner().invoke(app, ["run", "--help"], env={"COLUMNS": "400"})
    assert result.exit_code == 0, result.output
    for name in [*SANDBOXES.names(), *PROPOSERS.names()]:
        assert name in result.output
    assert "rlloop sandbox list" in result.output
    assert "auto, local, docker or ray" not in result.output


def test_sandbox_list_shows_builtins_plugins_and_problems(plugin_sandbox: str) -> None:
    result = CliRunner().invoke(app, ["sandbox", "list"], env={"COLUMNS": "200"})
    assert result.exit_code == 0, result.output
    for name in ["auto", "local", "docker", "ray", plugin_sandbox]:
        assert name in result.output
    assert "tests.agent.cli.test_cli" in result.output
    for problem in SANDBOXES.problems():
        assert problem[:40] in result.output


def test_a_bad_name_fails_at_once_and_writes_nothing(tmp_path: Path) -> None:
    """`rlloop run --recipes nope`: exit 2 with the bad name and the known ones, before any folder is made."""
    home = tmp_path / "home"
    done = subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", "--recipes", "sft,nope", "--home", str(home)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
        env={**os.environ, "COLUMNS": "400"},
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert "--recipes" in done.stderr and "unknown recipe 'nope': choose one of" in done.stderr
    assert "sft" in done.stderr.split("choose one of", 1)[1]
    assert not home.exists()  # no home, no run folder, no results row
