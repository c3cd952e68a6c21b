"""The Docker SDK, imported lazily (the local backend must work without it) and typed loosely.

Imported by name through importlib because the repository's `docker/` folder (the Dockerfiles) would otherwise
shadow the SDK for type checkers that scan from the repository root.
"""

from __future__ import annotations

import importlib
from typing import Any


def docker_sdk() -> Any:
    return importlib.import_module("docker")
