"""External agents: a run driven by an outside agent (AutoRL-Bench layout) instead of the research loop."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.external.agent_folder import (
        ExternalAgentError,
        is_agent_folder,
        load_agent,
        named_agent_problem,
    )
    from agent.external.agent_image import missing_agent_image
    from agent.external.driver import run_external

__all__ = [
    "ExternalAgentError",
    "is_agent_folder",
    "load_agent",
    "missing_agent_image",
    "named",
    "named_agent_problem",
    "run_external",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "ExternalAgentError": "agent.external.agent_folder",
    "is_agent_folder": "agent.external.agent_folder",
    "load_agent": "agent.external.agent_folder",
    "missing_agent_image": "agent.external.agent_image",
    "named": "agent.external.named",
    "named_agent_problem": "agent.external.agent_folder",
    "run_external": "agent.external.driver",
}


__getattr__ = lazy_face(__name__, _FACE)
