"""What a proposer sees and what it must return: the contract between the research loop and its brains."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Protocol, cast, runtime_checkable

from agent.core import Proposal, ProposalContext, Proposes

if TYPE_CHECKING:
    from agent.llm import Budget
    from agent.run import Reporter, RunConfig, RunPaths
    from sandbox.base import Sandbox, SandboxResult


class SearchDone(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a proposer that has nothing left worth trying (every branch saturated): the run ends early,
    finished, with this exception's message as its stop reason."""


class RunsScripts(Protocol):
    """Runs one script in the run's sandbox as a trial would be run (`agent.loop.trials.SandboxScripts`): handed to
    the proposer's tools by the loop, so they run code without importing the loop. Returns the sandbox's result
    and the host's folder the script wrote (its log.txt)."""

    def __call__(
        self, script_id: str, code: str, *, timeout_s: float, memory_mb: int
    ) -> tuple[SandboxResult, Path]: ...


class RunView(Protocol):
    """What a proposer may read of the run it proposes for (`agent.loop.resources.RunResources` is one)."""

    @property
    def config(self) -> RunConfig: ...

    @property
    def paths(self) -> RunPaths: ...

    @property
    def reporter(self) -> Reporter: ...

    @property
    def sandbox(self) -> Sandbox: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def base_model(self) -> Path: ...

    @property
    def scripts(self) -> RunsScripts:
        """Runs a proposer's scripts in the run's sandbox (the LLM proposer's `run_script` tool)."""
        ...

    def secrets(self) -> tuple[str, ...]:
        """What no result shown to a proposer may carry (the grader's token)."""
        ...


@runtime_checkable
class Proposer(Proposes, Protocol):
    """Chooses the next experiment from what earlier trials scored. What the loop calls:

    - `propose` for each trial;
    - `attach_run(run, trial_id)` before each proposal: the run (`RunView`: its folders, sandbox, budget, log,
      config), for a proposer that uses tools, the run log or the memory of earlier runs;
    - `repair(proposal, failure)` when a proposal's training code fails its check: a fixed proposal, or None when
      this proposer cannot repair code (the trial then fails with the check's message).

    `ProposerBase` has the defaults (nothing to attach, no repair)."""

    def attach_run(self, run: RunView, trial_id: str) -> None: ...

    def repair(self, proposal: Proposal, failure: str) -> Proposal | None: ...


class ProposerBase:
    """The hooks' defaults: a proposer that needs nothing of the run and cannot repair code. The built-in
    proposers derive from it."""

    def attach_run(self, run: RunView, trial_id: str) -> None:
        return None

    def repair(self, proposal: Proposal, failure: str) -> Proposal | None:
        return None


class WithDefaults(ProposerBase):
    """A plugin proposer that implements only `name` and `propose`, given the hooks' defaults."""

    def __init__(self, inner: Proposes) -> None:
        self.inner = inner
        self.name = inner.name

    def propose(self, context: ProposalContext) -> Proposal:
        return self.inner.propose(context)


def with_hooks(proposer: Proposes) -> Proposer:
    """`proposer` as the loop calls it: itself when it derives from `ProposerBase`, else with the defaults."""
    if isinstance(proposer, ProposerBase):
        return cast(Proposer, proposer)
    return cast(Proposer, WithDefaults(proposer))
