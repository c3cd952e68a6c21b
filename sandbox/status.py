"""Is Docker usable for trials here? Engine reachable, trainer image present and current, GPUs visible."""

from __future__ import annotations

import shutil
import subprocess
from typing import Any

from pydantic import BaseModel

from sandbox.dockerlib import docker_sdk
from sandbox.images import INPUTS_LABEL, OFFLINE_BASE, TRAINER_IMAGE, inputs_hash, pinned_requirements


class DockerStatus(BaseModel):
    engine_reachable: bool
    engine_error: str | None = None
    image: str = TRAINER_IMAGE
    image_present: bool = False
    image_current: bool = False  # the image's input-hash label matches what a build now would use
    image_inputs: str | None = None
    expected_inputs: str | None = None
    gpus_visible: int = 0

    @property
    def usable(self) -> bool:
        return self.engine_reachable and self.image_present

    def summary(self) -> str:
        if not self.engine_reachable:
            return f"docker engine not reachable ({self.engine_error}): run `bash .ci/docker.sh` or start dockerd"
        if not self.image_present:
            return f"image {self.image} missing: run `rlloop sandbox build`"
        state = (
            "current" if self.image_current else "stale (sources or deps changed): run `rlloop sandbox build`"
        )
        return f"docker ready: image {self.image} {state}; {self.gpus_visible} GPU(s) visible"


def _expected_inputs(client: Any) -> str | None:
    """The input hash a CPU build would stamp now (offline base when that is what the image was built on)."""
    try:
        requirements = pinned_requirements()
    except RuntimeError:
        return None
    base: str | None = None
    try:
        client.images.get(OFFLINE_BASE)
        base = OFFLINE_BASE
    except Exception:  # noqa: BLE001 - no offline base: the image was built online
        base = None
    return inputs_hash(False, base, requirements)


def _gpus_visible() -> int:
    if shutil.which("nvidia-smi") is None:
        return 0
    try:
        out = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=20).stdout
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(1 for line in out.splitlines() if line.startswith("GPU "))


def image_labels(image: str) -> dict[str, str]:
    """The labels of a local image ({} when it or the engine is missing)."""
    try:
        docker = docker_sdk()

        return dict(docker.from_env(timeout=10).images.get(image).labels or {})
    except Exception:  # noqa: BLE001 - no engine or no image: no labels
        return {}


def docker_status(image: str = TRAINER_IMAGE) -> DockerStatus:
    try:
        docker = docker_sdk()

        client = docker.from_env(timeout=10)
        client.ping()
    except Exception as exc:  # noqa: BLE001 - any failure here means "not reachable"; say which
        return DockerStatus(engine_reachable=False, engine_error=str(exc).splitlines()[0][:200], image=image)
    status = DockerStatus(engine_reachable=True, image=image, gpus_visible=_gpus_visible())
    try:
        found = client.images.get(image)
    except docker.errors.ImageNotFound:
        return status
    status.image_present = True
    status.image_inputs = (found.labels or {}).get(INPUTS_LABEL)
    status.expected_inputs = _expected_inputs(client)
    status.image_current = status.image_inputs is not None and status.image_inputs == status.expected_inputs
    return status
