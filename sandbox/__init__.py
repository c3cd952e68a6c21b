"""Run trial commands within limits: `get_sandbox("local" | "docker" | "auto")`, see sandbox/base.py."""

from sandbox.base import Mount, Sandbox, SandboxRequest, SandboxResult
from sandbox.registry import get_sandbox, list_backends, register_backend

__all__ = [
    "Mount",
    "Sandbox",
    "SandboxRequest",
    "SandboxResult",
    "get_sandbox",
    "list_backends",
    "register_backend",
]
