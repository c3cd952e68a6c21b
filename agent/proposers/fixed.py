"""The fixed recipe a person would run instead of a search: the run's first allowed recipe at its default
hyperparameters, always from the base model, a new seed each trial. One trial is "the default recipe once"; several
are "the default recipe repeated with different seeds, best on valid" (the submission policy picks). The control
every search policy must beat at equal compute (benchmarks/research_ladder.py)."""

from __future__ import annotations

from agent.core import Proposal, ProposalContext
from agent.proposers.base import ProposerBase
from agent.proposers.builtin import default_rates, trial_budget


class FixedProposer(ProposerBase):
    name = "fixed"

    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps

    def propose(self, context: ProposalContext) -> Proposal:
        seconds, budget = trial_budget(context, self.max_steps)
        recipe = (context.recipes or ["sft"])[0]
        again = f" again, seed {budget['seed']}" if context.trials else ""
        return Proposal(
            hypothesis=f"the default recipe: {recipe} at its default hyperparameters from the base model{again}.",
            rationale="The fixed recipe a search is measured against: no choice made from earlier trials.",
            recipe=recipe,
            hyperparameters={"learning_rate": default_rates(context).get(recipe, 1e-4), **budget},
            parent=None,
            operator="draft",
            estimated_cost_s=seconds,
        )
