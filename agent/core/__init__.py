"""The bottom of agent/: the run's records, shared by every part above and importing none of them."""

from agent.core.faces import lazy_face
from agent.core.proposes import Proposes
from agent.core.records import (
    CEILING,
    BaselineScore,
    Operator,
    Proposal,
    ProposalContext,
    TrialOutcome,
    TrialRecord,
    Validation,
    ValidSample,
)

__all__ = [
    "lazy_face",
    "BaselineScore",
    "CEILING",
    "Operator",
    "Proposal",
    "ProposalContext",
    "Proposes",
    "TrialOutcome",
    "TrialRecord",
    "ValidSample",
    "Validation",
]
