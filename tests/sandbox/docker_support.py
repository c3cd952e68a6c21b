"""Docker test plumbing: the engine must answer in CI (CI=true), elsewhere its absence skips the tests."""

from __future__ import annotations

import os
import subprocess

import pytest

from sandbox.images import TRAINER_IMAGE

IMAGE = os.environ.get("RLLOOP_TEST_IMAGE", TRAINER_IMAGE)


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def require_docker() -> None:
    """Skip (outside CI) or fail (in CI) when the engine does not answer or the image is missing."""
    try:
        engine_ok = subprocess.run(["docker", "info"], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        engine_ok = False
    if not engine_ok:
        message = "docker engine not reachable (`docker info` failed): run `bash .ci/docker.sh`"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
    image_ok = subprocess.run(["docker", "image", "inspect", IMAGE], capture_output=True).returncode == 0
    if not image_ok:
        message = f"image {IMAGE} missing: run `rlloop sandbox build`"
        if _in_ci():
            pytest.fail(message)
        pytest.skip(message)
