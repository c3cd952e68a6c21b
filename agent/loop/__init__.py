"""The research loop: its graph, nodes and driver, and the steps the nodes call (training a trial, validating it,
the submission policy, concurrent trials, the code check, approvals)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.loop.approvals import Decision, list_pending, policy_requires, write_decision
    from agent.loop.driver import execute
    from agent.loop.trials import TRAIN_ENV

__all__ = [
    "Decision",
    "TRAIN_ENV",
    "execute",
    "list_pending",
    "policy_requires",
    "write_decision",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "Decision": "agent.loop.approvals",
    "TRAIN_ENV": "agent.loop.trials",
    "execute": "agent.loop.driver",
    "list_pending": "agent.loop.approvals",
    "policy_requires": "agent.loop.approvals",
    "write_decision": "agent.loop.approvals",
}


__getattr__ = lazy_face(__name__, _FACE)
