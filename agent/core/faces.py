"""How a part of agent/ shows its face: each name another part may use, loaded from its module on first use."""

from __future__ import annotations

import sys
from collections.abc import Callable
from importlib import import_module
from typing import Any


def lazy_face(package: str, face: dict[str, str]) -> Callable[[str], Any]:
    """The module `__getattr__` of `package`: a name of `face` (name -> the module that defines it, or the module
    itself when the name is its last part) is imported when first asked for and kept in the package, so importing
    one module of a part loads no other."""

    def load(name: str) -> Any:
        module = face.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = (
            import_module(module) if module == f"{package}.{name}" else getattr(import_module(module), name)
        )
        setattr(sys.modules[package], name, value)
        return value

    return load
