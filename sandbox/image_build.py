"""Build the images: the trainer image (a context with the wheelhouse and the packages a trial may import, then
`docker build`; offline on a base made here) and the agent image on top of it (the agent packages the trainer image
lacks, and the coding agents' tar)."""

from __future__ import annotations

import hashlib
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.agent_clis import AGENT_CLIS_TAR, agent_clis_pins, build_agent_clis
from sandbox.base import TRIAL_PACKAGES
from sandbox.dockerlib import docker_sdk
from sandbox.images import (
    AGENT_IMAGE,
    IMAGE_PYPROJECT,
    TRAINER_GPU_IMAGE,
    TRAINER_IMAGE,
    agent_dockerfile,
    agent_requirements,
    dockerfile,
    inputs_hash,
    pinned_requirements,
    project_root,
)
from sandbox.offline_base import build_offline_base, registry_reachable
from sandbox.wheelhouse import build_wheelhouse, in_wheelhouse, wheelhouse_dir

Say = Callable[[str], None]


def _assemble_context(ctx: Path, gpu: bool, house: Path) -> None:
    root = project_root()
    shutil.copy(dockerfile(gpu), ctx / "Dockerfile")
    wheels = ctx / "wheelhouse"
    wheels.mkdir()
    if not gpu:
        for item in house.iterdir():
            if item.suffix == ".whl":
                try:
                    os.link(item, wheels / item.name)
                except OSError:
                    shutil.copy(item, wheels / item.name)
    shutil.copy(house / "requirements.txt", wheels / "requirements.txt")
    src = ctx / "src"
    src.mkdir()
    (src / "pyproject.toml").write_text(IMAGE_PYPROJECT)
    for package in TRIAL_PACKAGES:
        shutil.copytree(root / package, src / package, ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))


def build_image(gpu: bool = False, offline: bool | None = None, say: Say = print) -> str:
    """Build the trainer image and return its tag. `offline=None` decides by whether a registry answers."""
    docker = docker_sdk()

    client = docker.from_env(timeout=600)
    client.ping()
    if offline is None:
        offline = not registry_reachable()
        say(f"registry {'unreachable: building offline' if offline else 'reachable: building online'}")
    if gpu and offline:
        raise RuntimeError(
            "the GPU image needs a registry (CUDA base image) and PyPI: build it with --online"
        )
    base = build_offline_base(client, say) if offline else None
    requirements = pinned_requirements()
    if gpu:
        house = wheelhouse_dir()
        house.mkdir(parents=True, exist_ok=True)
        (house / "requirements.txt").write_text("\n".join(requirements) + "\n")
    else:
        house = build_wheelhouse(requirements, say)
    tag = TRAINER_GPU_IMAGE if gpu else TRAINER_IMAGE
    digest = inputs_hash(gpu, base, requirements)
    buildargs = {"RLLOOP_INPUTS": digest}
    if base:
        buildargs["BASE_IMAGE"] = base
    with tempfile.TemporaryDirectory(prefix="rlloop-build-", dir=house.parent) as tmp:
        ctx = Path(tmp)
        _assemble_context(ctx, gpu, house)
        say(f"docker build {tag} (inputs {digest})")
        _docker_build(client, ctx, tag, buildargs, pull=not offline, say=say)
    say(f"built {tag}")
    return tag


def _docker_build(
    client: Any, ctx: Path, tag: str, buildargs: dict[str, str], *, pull: bool, say: Say
) -> None:
    """`docker build` of the context folder, saying each step; a failed step raises with the engine's message."""
    for event in client.api.build(
        path=str(ctx), tag=tag, buildargs=buildargs, rm=True, forcerm=True, decode=True, pull=pull
    ):
        if "error" in event:
            raise RuntimeError(f"docker build failed: {event['error'].strip()}")
        line = str(event.get("stream", "")).rstrip()
        if line.startswith("Step ") or line.startswith("Successfully"):
            say(line)


def agent_inputs_hash(trainer_id: str, requirements: list[str]) -> str:
    """What the agent image is built from: its Dockerfile, its pinned packages (the CLIs' too), and the trainer
    image under it."""
    digest = hashlib.sha256()
    digest.update(agent_dockerfile().read_bytes())
    digest.update("\n".join(requirements).encode())
    digest.update(agent_clis_pins().encode())
    digest.update(trainer_id.encode())
    return digest.hexdigest()[:16]


def build_agent_image(say: Say = print) -> str:
    """Build `rlloop/agent:cpu`: the CPU trainer image (built first when missing) plus the wheels of AutoRL-Bench's
    agent packages it lacks, downloaded on this host (containers never reach a registry)."""
    docker = docker_sdk()

    client = docker.from_env(timeout=600)
    client.ping()
    try:
        trainer = client.images.get(TRAINER_IMAGE)
    except docker.errors.ImageNotFound:
        say(f"{TRAINER_IMAGE} missing: building it first")
        build_image(gpu=False, say=say)
        trainer = client.images.get(TRAINER_IMAGE)
    requirements = agent_requirements()
    extra = [r for r in requirements if not in_wheelhouse(r, wheelhouse_dir())]
    house = build_wheelhouse(extra, say, house=wheelhouse_dir() / "agent")
    clis = build_agent_clis(say)
    digest = agent_inputs_hash(str(trainer.id), requirements)
    with tempfile.TemporaryDirectory(prefix="rlloop-agent-build-", dir=house.parent) as tmp:
        ctx = Path(tmp)
        shutil.copy(agent_dockerfile(), ctx / "Dockerfile")
        wheels = ctx / "wheelhouse"
        wheels.mkdir()
        for item in house.glob("*.whl"):
            shutil.copy(item, wheels / item.name)
        (wheels / "requirements.txt").write_text("\n".join(requirements) + "\n")
        try:  # a link, not a copy of about 1 GB (the context is sent to the engine as it is either way)
            os.link(clis, ctx / AGENT_CLIS_TAR)
        except OSError:
            shutil.copy(clis, ctx / AGENT_CLIS_TAR)
        say(f"docker build {AGENT_IMAGE} (inputs {digest}) on {TRAINER_IMAGE}")
        buildargs = {
            "RLLOOP_INPUTS": digest,
            "TRAINER_IMAGE": TRAINER_IMAGE,
            "AGENT_CLIS": agent_clis_pins(),
        }
        _docker_build(client, ctx, AGENT_IMAGE, buildargs, pull=False, say=say)
    say(f"built {AGENT_IMAGE}")
    return AGENT_IMAGE
