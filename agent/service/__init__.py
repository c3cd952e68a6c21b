"""`rlloop serve`: the run service (HTTP API + approvals page) over one RLLOOP_HOME."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face
from agent.service.settings import ServiceSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

    from agent.service.cli import serve_app
    from agent.service.serving import serve

__all__ = [
    "ServiceSettings",
    "create_app",
    "serve",
    "serve_app",
]


def create_app(settings: ServiceSettings) -> FastAPI:
    """The service's FastAPI app (imported lazily: `import agent.service` stays light)."""
    from agent.service.app import create_app as build

    return build(settings)


# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "serve": "agent.service.serving",
    "serve_app": "agent.service.cli",
}


__getattr__ = lazy_face(__name__, _FACE)
