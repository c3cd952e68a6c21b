"""Fixtures for trainer tests: workspace-style JSONL files and a helper that runs `python -m trainers`."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from grader.benchmarks import get_benchmark

REPO = Path(__file__).resolve().parents[2]


def write_jsonl(path: Path, split: str, limit: int) -> Path:
    with path.open("w") as fh:
        for sample in get_benchmark("arith").load(split)[:limit]:  # type: ignore[arg-type]
            fh.write(json.dumps({"id": sample.id, "prompt": sample.prompt, "answer": sample.answer}) + "\n")
    return path


@pytest.fixture(scope="session")
def arith_train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", "train", 4000)


def run_trainers(
    recipe: str, config: dict[str, Any], config_path: Path, timeout: float = 600
) -> subprocess.CompletedProcess[str]:
    """`python -m trainers <recipe> --config FILE` as a real subprocess, as the sandbox runs it."""
    config_path.write_text(json.dumps(config, default=str))
    env = {**os.environ, "PYTHONPATH": str(REPO), "OMP_NUM_THREADS": "1"}
    return subprocess.run(
        [sys.executable, "-m", "trainers", recipe, "--config", str(config_path)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
