"""Docker test plumbing: the engine must answer in CI (CI=true), elsewhere its absence skips the tests."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from sandbox.images import TRAINER_IMAGE

IMAGE = os.environ.get("RLLOOP_TEST_IMAGE", TRAINER_IMAGE)
# set by .ci/test.sh, which builds the images beside the suite
IMAGES_STATUS_ENV = "RLLOOP_TEST_IMAGES_STATUS"
IMAGES_WAIT_S = 1800.0


def _in_ci() -> bool:
    return os.environ.get("CI", "").lower() in ("1", "true", "yes")


def wait_for_image_build() -> None:
    """`make test` builds the images while the suite starts; a Docker test waits here for that build to end, and
    fails with the build's log if it failed. Without RLLOOP_TEST_IMAGES_STATUS (any other run) it returns at once."""
    path = os.environ.get(IMAGES_STATUS_ENV)
    if not path:
        return
    status_file = Path(path)
    deadline = time.monotonic() + IMAGES_WAIT_S
    while not status_file.exists():
        if time.monotonic() > deadline:
            pytest.fail(f"the image build did not end in {IMAGES_WAIT_S:.0f}s (no {status_file})")
        time.sleep(1.0)
    status = status_file.read_text().strip()
    if status != "0":
        log = status_file.with_name("images.log")
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:]) if log.exists() else ""
        pytest.fail(f"building the images failed (exit {status}); the end of {log}:\n{tail}")


def require_docker() -> None:
    """Skip (outside CI) or fail (in CI) when the engine does not answer or the image is missing."""
    wait_for_image_build()
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
