"""Processes rlloop owns, and its own: child processes and how they end (`children`), a free port for a child
server (`ports`), and a run's Ctrl-C and SIGTERM as one exception (`interrupts`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.processes.children import Child, kill_tree, run_child, signal_group, spawn_child
    from agent.processes.interrupts import (
        RunInterrupted,
        failpoint,
        interrupts_as_exceptions,
        interrupts_in_main_thread,
    )
    from agent.processes.ports import free_port

__all__ = [
    "Child",
    "RunInterrupted",
    "failpoint",
    "free_port",
    "interrupts_as_exceptions",
    "interrupts_in_main_thread",
    "kill_tree",
    "run_child",
    "signal_group",
    "spawn_child",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "Child": "agent.processes.children",
    "RunInterrupted": "agent.processes.interrupts",
    "failpoint": "agent.processes.interrupts",
    "free_port": "agent.processes.ports",
    "interrupts_as_exceptions": "agent.processes.interrupts",
    "interrupts_in_main_thread": "agent.processes.interrupts",
    "kill_tree": "agent.processes.children",
    "run_child": "agent.processes.children",
    "signal_group": "agent.processes.children",
    "spawn_child": "agent.processes.children",
}


__getattr__ = lazy_face(__name__, _FACE)
