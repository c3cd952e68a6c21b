"""Random search over the built-in policies' space: a uniform parent (the base model or any scored trial), a uniform
recipe, a learning rate drawn around the recipe's default. The control the search policies are measured against
(benchmarks/research_ladder.py); seeded by the run's seed, so a run repeats."""

from __future__ import annotations

import random

from agent.proposers.base import Proposal, ProposalContext, ProposerBase
from agent.proposers.builtin import DEFAULT_LR, trial_budget, value

LR_FACTORS = (0.3, 0.5, 0.7, 1.0, 2.0)


class RandomProposer(ProposerBase):
    name = "random"

    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps

    def propose(self, context: ProposalContext) -> Proposal:
        seconds, budget = trial_budget(context, self.max_steps)
        rng = random.Random(context.seed * 7919 + len(context.trials))
        parents: list[str | None] = [None]
        parents += [t.trial_id for t in context.trials if t.status == "succeeded" and value(t) is not None]
        parent = rng.choice(parents)
        recipe = rng.choice(context.recipes or ["sft", "grpo"])
        lr = DEFAULT_LR.get(recipe, 1e-4) * rng.choice(LR_FACTORS)
        return Proposal(
            hypothesis=f"random search: {recipe} at learning rate {lr:.3g} from {parent or 'the base model'}.",
            rationale="A uniform draw over parents, recipes and learning rates.",
            recipe=recipe,
            hyperparameters={"learning_rate": lr, **budget},
            parent=parent,
            operator="draft" if parent is None else "improve",
            estimated_cost_s=seconds,
        )
