"""Fixtures for grader tests: tiny random checkpoints and real grader server processes on 127.0.0.1."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.grader.tiny import make_tiny_model

REPO = Path(__file__).resolve().parents[2]
TOKEN = "test-token-123456"


@pytest.fixture(scope="session")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny char-level Llama (safetensors + tokenizer); scores ~0 on arith, which is all tests need."""
    return make_tiny_model(tmp_path_factory.mktemp("base") / "tiny-base", seed=0)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class GraderProcess:
    """`python -m grader serve` in its own process group, with helpers for HTTP calls and crash tests."""

    def __init__(self, root: Path, base_model: Path, **overrides: Any) -> None:
        self.root = root
        self.workspace = root / "workspace"
        self.workspace.mkdir(parents=True, exist_ok=True)
        self.private_dir = root / "grader-private"
        self.mirror = root / "scores.json"
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.config: dict[str, Any] = {
            "run_id": "test-run",
            "benchmark": "arith",
            "base_model": str(base_model),
            "private_dir": str(self.private_dir),
            "scores_mirror": str(self.mirror),
            "token": TOKEN,
            "port": self.port,
            "allowed_roots": [str(self.workspace)],
            "eval": {"limit": 40, "batch_size": 64},
            "torch_threads": 1,
        }
        for key, value in overrides.items():
            if isinstance(value, dict) and isinstance(self.config.get(key), dict):
                self.config[key] = {**self.config[key], **value}
            else:
                self.config[key] = value
        self.config_path = root / "grader.json"
        self.config_path.write_text(json.dumps(self.config))
        self.proc: subprocess.Popen[bytes] | None = None
        self.auth = {"Authorization": f"Bearer {TOKEN}"}

    def start(self, timeout: float = 180.0) -> GraderProcess:
        env = {
            **os.environ,
            "OMP_NUM_THREADS": "1",
            "MKL_NUM_THREADS": "1",
            "TOKENIZERS_PARALLELISM": "false",
        }
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "grader", "serve", "--config", str(self.config_path)],
            cwd=REPO,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=(self.root / "stderr.txt").open("ab"),
            start_new_session=True,
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"grader exited early: {(self.root / 'stderr.txt').read_text()[-2000:]}")
            try:
                health = httpx.get(f"{self.url}/health", timeout=2).json()
                if health.get("ready"):
                    return self
                if health.get("status") == "error":
                    raise RuntimeError(f"grader failed to start: {health}")
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError("grader did not become ready in time")

    def kill9(self) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=10)

    def submit(
        self, model_path: Path | str, timeout: float = 300.0, token: str | None = TOKEN
    ) -> httpx.Response:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        return httpx.post(
            f"{self.url}/submit", json={"model_path": str(model_path)}, headers=headers, timeout=timeout
        )

    def get(self, path: str) -> Any:
        response = httpx.get(f"{self.url}{path}", timeout=30)
        response.raise_for_status()
        return response.json()


def copy_checkpoint(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


@pytest.fixture
def grader_factory(tmp_path: Path, tiny_base: Path) -> Iterator[Any]:
    """Start graders with config overrides; all are stopped at teardown."""
    started: list[GraderProcess] = []

    def make(name: str = "g", **overrides: Any) -> GraderProcess:
        grader = GraderProcess(tmp_path / name, tiny_base, **overrides)
        started.append(grader)
        return grader

    yield make
    for grader in started:
        grader.stop()
