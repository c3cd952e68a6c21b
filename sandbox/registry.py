"""Pick a sandbox backend by name: "local", "docker", "ray", or "auto" (docker when usable, else local)."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from sandbox.base import Sandbox

log = logging.getLogger("rlloop.sandbox")


def _local(**opts: Any) -> Sandbox:
    from sandbox.backends.local import LocalSandbox

    return LocalSandbox(**opts)


def _docker(**opts: Any) -> Sandbox:
    from sandbox.backends.docker import DockerSandbox

    return DockerSandbox(**opts)


def _ray(**opts: Any) -> Sandbox:
    from sandbox.backends.ray import RaySandbox

    return RaySandbox(**opts)


_BACKENDS: dict[str, Callable[..., Sandbox]] = {"local": _local, "docker": _docker, "ray": _ray}


def register_backend(name: str, factory: Callable[..., Sandbox]) -> None:
    """Add a backend (e.g. "ray") under `name`."""
    _BACKENDS[name] = factory


def list_backends() -> list[str]:
    return sorted([*_BACKENDS, "auto"])


def get_sandbox(name: str = "auto", **opts: Any) -> Sandbox:
    """The backend called `name`, built with `opts`. "auto" says once, in a warning, why it fell back to local."""
    if name == "auto":
        from sandbox.images import TRAINER_IMAGE
        from sandbox.status import docker_status

        status = docker_status(opts.get("image", TRAINER_IMAGE))
        if status.usable:
            return _docker(**opts)
        log.warning("sandbox 'auto' is using the local backend (no isolation): %s", status.summary())
        opts.pop("image", None)
        return _local(**opts)
    factory = _BACKENDS.get(name)
    if factory is None:
        raise ValueError(f"unknown sandbox {name!r}: choose one of {', '.join(list_backends())}")
    return factory(**opts)
