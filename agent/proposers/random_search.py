"""Random search over the built-in policies' space: a uniform parent (the base model or any scored trial), a uniform
recipe, a learning rate drawn around the recipe's default, a schedule, and (where the run divides a compute budget)
one or two trials' worth of seconds. The control the search policies are measured against
(benchmarks/research_ladder.py); seeded by the run's seed, so a run repeats."""

from __future__ import annotations

import random

from agent.core import Proposal, ProposalContext
from agent.proposers.base import ProposerBase
from agent.proposers.builtin import default_rates, trial_budget, value
from agent.proposers.data_moves import data_report, takes_row_moves

LR_FACTORS = (0.3, 0.5, 0.7, 1.0, 2.0)
SCHEDULES = (
    "linear",
    "cosine",
    "constant",
)  # constant: no decay, the schedules the trainer library had before
LENGTHS = (1.0, 2.0)  # trials' worth of wall seconds, where the run has a compute budget to divide


class RandomProposer(ProposerBase):
    name = "random"

    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps

    def propose(self, context: ProposalContext) -> Proposal:
        rng = random.Random(context.seed * 7919 + len(context.trials))
        parents: list[str | None] = [None]
        parents += [t.trial_id for t in context.trials if t.status == "succeeded" and value(t) is not None]
        parent = rng.choice(parents)
        recipe = rng.choice(context.recipes or ["sft", "grpo"])
        lr = default_rates(context).get(recipe, 1e-4) * rng.choice(LR_FACTORS)
        schedule = rng.choice(SCHEDULES)
        data = data_report(context.workspace, context.benchmark)
        choices = rng.choice([{}, *(m.fields for m in data.moves)]) if takes_row_moves(recipe) else {}
        divisible = context.compute_left_s is not None and context.trial_seconds is not None
        share = rng.choice(LENGTHS) if divisible else 1.0
        seconds, budget = trial_budget(context, self.max_steps, share)
        length = f", {share:g} trials' worth" if share != 1.0 else ""
        return Proposal(
            hypothesis=f"random search: {recipe} at learning rate {lr:.3g} ({schedule}{length}) from "
            f"{parent or 'the base model'}.",
            rationale="A uniform draw over parents, recipes, learning rates, schedules and trial lengths.",
            recipe=recipe,
            hyperparameters={"learning_rate": lr, "lr_scheduler_type": schedule, **choices, **budget},
            parent=parent,
            operator="draft" if parent is None else "improve",
            estimated_cost_s=seconds,
        )
