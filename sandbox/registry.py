"""Pick a sandbox backend by name: "local", "docker", "ray", or "auto" (docker when usable, else local). `resolve_auto`
is the one place that decides what "auto" is, for research runs, external agents and Ray's nodes alike."""

from __future__ import annotations

import importlib
import logging
from collections.abc import Callable
from typing import Any, Literal, NamedTuple

from sandbox.base import Sandbox
from tasks.plugins import Registry

log = logging.getLogger("rlloop.sandbox")


def _builtin(module: str, cls: str) -> Callable[..., Sandbox]:
    """A built-in backend's factory, loaded by name on first use like a plugin's entry point (so a backend, the
    Ray one choosing its inner sandbox here, may import this module without forming a circle)."""

    def make(**opts: Any) -> Sandbox:
        factory: Callable[..., Sandbox] = getattr(importlib.import_module(module), cls)
        return factory(**opts)

    return make


def _register_builtins() -> None:
    SANDBOXES.register("local", _builtin("sandbox.backends.local", "LocalSandbox"))
    SANDBOXES.register("docker", _builtin("sandbox.backends.docker", "DockerSandbox"))
    SANDBOXES.register("ray", _builtin("sandbox.backends.ray", "RaySandbox"))


SANDBOXES: Registry[Callable[..., Sandbox]] = Registry(
    "sandbox",
    "rlloop.sandboxes",
    builtins=_register_builtins,
    reserved=("auto",),
    hint="see `rlloop sandbox list`",
)


def register_backend(name: str, factory: Callable[..., Sandbox], *, replace: bool = False) -> None:
    """Add a backend under `name` (plugins can declare one in the `rlloop.sandboxes` entry point group instead)."""
    SANDBOXES.register(name, factory, replace=replace)


def list_backends() -> list[str]:
    return sorted(SANDBOXES.choices())


def isolation_of(sandbox: Sandbox) -> str:
    """How a backend isolates its trials: "container" (docker), "namespaces" (local with bubblewrap), or "none".
    A run that trains unisolated carries `isolation=none` on every score, MLflow run, results row and report."""
    return sandbox.isolation or "none"


class AutoChoice(NamedTuple):
    """What "auto" stands for on this machine now, and why (Docker's state in one line), with the image docker
    runs when it is the choice (None for local)."""

    name: Literal["docker", "local"]
    reason: str
    image: str | None = None


def resolve_auto(image: str | None = None) -> AutoChoice:
    """The one decision behind "auto", for research runs, external agents and a Ray node's inner sandbox: docker
    when its engine answers and `image` (default: the trainer image) is built, else local."""
    from sandbox.images import TRAINER_IMAGE
    from sandbox.status import docker_status

    image = image or TRAINER_IMAGE
    try:
        status = docker_status(image)
    except Exception as exc:  # noqa: BLE001 - whatever Docker says, "auto" still has an answer: local
        return AutoChoice("local", f"docker status unreadable: {type(exc).__name__}: {exc}")
    if status.usable:
        return AutoChoice("docker", status.summary(), image)
    return AutoChoice("local", status.summary())


def get_sandbox(name: str = "auto", **opts: Any) -> Sandbox:
    """The backend called `name`, built with `opts`. "auto" (`resolve_auto`, with the `image` in `opts`): docker, or
    local isolated by namespaces where this machine can; when it cannot, it says so once, in a warning."""
    if name == "auto":
        choice = resolve_auto(opts.get("image"))
        if choice.name == "docker":
            return SANDBOXES.get("docker")(**{**opts, "image": choice.image})
        opts.pop("image", None)
        local = SANDBOXES.get("local")(**opts)
        if isolation_of(local) == "none":
            log.warning(
                "sandbox 'auto' is using the local backend with NO isolation (isolation=none): %s; and %s",
                local.isolation_reason or "no namespaces",
                choice.reason,
            )
        return local
    factory = SANDBOXES.get(name)  # UnknownPluginError (a KeyError) lists the registered backends
    if name == "local":
        opts.setdefault("isolate", True)  # asked for by name: isolated, or a clear error that says why not
    return factory(**opts)
