"""The trainer image has what a trial needs: torch/transformers/trl, the rlloop packages, a non-root user."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from sandbox.backends.docker import DockerSandbox
from sandbox.base import SandboxRequest
from sandbox.images import TRAINER_IMAGE
from sandbox.status import docker_status
from tests.sandbox.docker_support import require_docker

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sandbox() -> DockerSandbox:
    require_docker()
    if docker_status(TRAINER_IMAGE).image_present is False:
        pytest.skip(f"{TRAINER_IMAGE} not built")
    return DockerSandbox(image=TRAINER_IMAGE)


def _ws(tmp_path: Path) -> Path:
    (tmp_path / "ws").mkdir(exist_ok=True)
    return tmp_path / "ws"


def test_training_stack_imports_inside(sandbox: DockerSandbox, tmp_path: Path) -> None:
    code = "import torch, transformers, trl, peft, datasets, trainers, tasks; print('IMPORTS', torch.__version__)"
    result = sandbox.run(
        SandboxRequest(
            command=["python", "-c", code],
            workspace=_ws(tmp_path),
            log_path=tmp_path / "log.txt",
            timeout_s=300,
        )
    )
    assert result.ok, result.log_tail
    assert "IMPORTS 2." in result.log_tail


@pytest.mark.skipif(
    importlib.util.find_spec("trainers.__main__") is None,
    reason="trainers has no __main__ yet (lead to enable)",
)
def test_trainers_list_runs_inside(sandbox: DockerSandbox, tmp_path: Path) -> None:
    result = sandbox.run(
        SandboxRequest(
            command=["python", "-m", "trainers", "--list"],
            workspace=_ws(tmp_path),
            log_path=tmp_path / "log.txt",
            timeout_s=300,
        )
    )
    assert result.ok, result.log_tail
    assert result.log_tail.strip()
