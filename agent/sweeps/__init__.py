"""Sweeps: every combination of benchmarks x base models x agents x seeds as resumable research runs, compared."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.sweeps.cli import bench, report

from agent.sweeps.spec import Combination, SweepSpec

__all__ = [
    "Combination",
    "SweepSpec",
    "bench",
    "report",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "bench": "agent.sweeps.cli",
    "report": "agent.sweeps.cli",
}


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = import_module(module) if module == f"{__name__}.{name}" else getattr(import_module(module), name)
    globals()[name] = value
    return value
