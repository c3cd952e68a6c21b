"""Sweeps: every combination of benchmarks x base models x agents x seeds as resumable research runs, compared."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.sweeps.cli import bench, report

__all__ = [
    "bench",
    "report",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "bench": "agent.sweeps.cli",
    "report": "agent.sweeps.cli",
}


__getattr__ = lazy_face(__name__, _FACE)
