"""`python -m grader serve --config FILE` refuses bad configs with one clear line and exit code 2."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _serve(config_path: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "grader", "serve", "--config", str(config_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )


@pytest.mark.parametrize(
    ("change", "message"),
    [
        (None, "cannot read grader config"),
        ({"token": "short"}, "invalid grader config"),
        ({"benchmark": "nope"}, "unknown benchmark 'nope'"),
        ({"base_model": "/nonexistent/model"}, "has no config.json"),
    ],
)
def test_bad_configs_exit_with_one_line(
    tmp_path: Path, tiny_base: Path, change: dict[str, str] | None, message: str
) -> None:
    config = {
        "run_id": "cli",
        "benchmark": "arith",
        "base_model": str(tiny_base),
        "private_dir": str(tmp_path / "private"),
        "token": "t" * 16,
        "allowed_roots": [str(tmp_path / "ws")],
    }
    path = tmp_path / "grader.json"
    if change is not None:
        path.write_text(json.dumps({**config, **change}))
    result = _serve(path)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and message in lines[0], result.stderr
