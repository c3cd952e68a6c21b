"""The wheels the images install, downloaded on the host at its own versions (containers never reach a registry):
exactly what is installed here, each wheel without resolving (`host_closure`); only a requirement this host lacks
goes through pip's resolver, held to the host's versions by constraints."""

from __future__ import annotations

import importlib.metadata
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

from sandbox.images import project_root
from tasks.atomic import atomic_write_text

Say = Callable[[str], None]


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


def in_wheelhouse(requirement: str, house: Path) -> bool:
    """Is `name==version` among the trainer image's wheels (then the trainer image already has it installed)?"""
    name, _, version = requirement.partition("==")
    wanted = name.lower().replace("-", "_")
    for wheel in house.glob("*.whl"):
        parts = wheel.name.split("-")
        if parts[0].lower() == wanted and parts[1].split("+")[0] == version:
            return True
    return False
