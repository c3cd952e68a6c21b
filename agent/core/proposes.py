"""The least a proposer is: a name and `propose`. Here, at the bottom of agent/, so that the registry of proposers
(`agent.run.plugins.PROPOSERS`, which `RunConfig.proposer` is checked against) can name the type its factories make
without importing the proposers, which stand above the run's modules. The hooks the loop calls besides are
`agent.proposers.base.Proposer`."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from agent.core.records import Proposal, ProposalContext

__all__ = ["Proposes"]


@runtime_checkable
class Proposes(Protocol):
    """The least a proposer plugin implements: a name and `propose` (`make_proposer` gives it the hooks' defaults)."""

    name: str

    def propose(self, context: ProposalContext) -> Proposal: ...
