"""Successive halving over continuations: start several lines, keep the best, continue it with its optimizer, cool
down once at the end.

A line is a chain of trials, each continuing the one before from its checkpoint. The run's compute is divided into
units of one trial's seconds (`--trial-seconds`; `--max-compute-s` / those seconds, else the trial count):

1. Stage 0 drafts `k0` lines from the base model, one unit each: the tree's first drafts (the default recipe at its
   rate, the other recipes, the default at a larger and a smaller rate), all on a constant rate after a short
   warm-up, so none has spent its decay before the comparison.
2. Each later stage keeps the better half of the lines by valid score and continues them one unit each, carrying
   Adam's moments (`resume_optimizer`) at the same constant rate: one long run, cut for a look.
3. The last stage's one line spends every unit left in one trial, its rate cooled down linearly to zero over the
   trial's second half (warm-up, stable, decay): the line anneals once, at its end.

Nothing but the trials is kept: the plan is derived from them each time, so a resumed run goes on where it stopped.
A line that fails drops out; when no line is left, the search ends and says why.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from agent.core import Proposal, ProposalContext, TrialRecord
from agent.proposers.base import ProposerBase, SearchDone
from agent.proposers.builtin import trial_budget, value
from agent.proposers.data_moves import carried, data_report
from agent.proposers.tree import Move, build_tree, moves

STABLE = {"lr_scheduler_type": "constant", "warmup_ratio": 0.1}
CONTINUED = {"lr_scheduler_type": "constant", "warmup_ratio": 0.0, "resume_optimizer": True}
COOLDOWN_RATIO = 0.5  # of the last trial: with two units left, the last third of a three-unit line


def stage_sizes(units: int, max_first: int | None = None) -> list[int]:
    """Lines alive at each stage for `units` of compute: about half the units go to the drafts (no more than the
    `max_first` distinct drafts there are), then each stage halves the lines, and the last stage's one line takes
    what is left (at least one unit)."""
    if units <= 1:
        return [1]
    first = max(2, math.ceil(units / 2)) if units >= 3 else 1
    if max_first is not None:
        first = max(1, min(first, max_first))
    sizes = [first]
    while sizes[-1] > 1 and sum(sizes) + math.ceil(sizes[-1] / 2) < units:
        sizes.append(math.ceil(sizes[-1] / 2))
    if sizes[-1] > 1:
        sizes.append(1)
    return sizes


@dataclass(frozen=True)
class Line:
    """A chain of trials from the base model; its value is its newest trial's."""

    trials: list[TrialRecord]

    @property
    def head(self) -> TrialRecord:
        return self.trials[-1]

    @property
    def score(self) -> float:
        return value(self.head) or 0.0


def lines_at(trials: list[TrialRecord], depth: int) -> list[Line]:
    """Every line whose trial at `depth` (1: the draft) succeeded and was scored, best first."""
    by_id = {t.trial_id: t for t in trials}
    found = []
    for trial in trials:
        chain = [trial]
        while chain[0].proposal.init_from and chain[0].proposal.init_from in by_id:
            chain.insert(0, by_id[chain[0].proposal.init_from])
        if len(chain) == depth and trial.status == "succeeded" and value(trial) is not None:
            found.append(Line(chain))
    return sorted(found, key=lambda line: (-line.score, line.head.index))


def depth_of(trial: TrialRecord, trials: list[TrialRecord]) -> int:
    by_id = {t.trial_id: t for t in trials}
    depth, current = 1, trial
    while current.proposal.init_from and current.proposal.init_from in by_id:
        depth, current = depth + 1, by_id[current.proposal.init_from]
    return depth


class HalvingProposer(ProposerBase):
    """Successive halving over continuations (module docstring)."""

    name = "halving"

    def __init__(self, max_steps: int | None = None) -> None:
        self.max_steps = max_steps

    @staticmethod
    def units(context: ProposalContext) -> int:
        """The run's compute in trial units: what was spent plus what is left, over one trial's seconds."""
        spent = sum(t.wall_s for t in context.trials)
        if context.trial_seconds and context.compute_left_s is not None:
            return max(1, round((spent + context.compute_left_s) / context.trial_seconds))
        return max(1, len(context.trials) + context.trials_left)

    def propose(self, context: ProposalContext) -> Proposal:
        units = self.units(context)
        trials = context.trials
        data = data_report(context.workspace, context.benchmark)
        drafts = moves(
            build_tree(context)[0], context.recipes or ["sft", "grpo"], None, data
        )  # not tried yet
        drafted = sum(1 for t in trials if depth_of(t, trials) == 1)
        # on a large budget there are fewer distinct drafts than half its units: the later stages get the rest
        sizes = stage_sizes(units, max_first=drafted + len(drafts))
        for stage, size in enumerate(sizes):
            at_stage = [t for t in trials if depth_of(t, trials) == stage + 1]
            if len(at_stage) >= size:
                continue
            last = stage == len(sizes) - 1
            if stage == 0:
                if not drafts:
                    raise SearchDone("successive halving: no draft left to start a line with")
                return self._draft(context, drafts[0], sizes, last)  # the first draft not tried yet
            continued = {t.proposal.init_from for t in at_stage}
            survivors = lines_at(trials, stage)[:size]
            waiting = [line for line in survivors if line.head.trial_id not in continued]
            if not waiting:
                if not survivors:
                    raise SearchDone(
                        f"successive halving: no line survived stage {stage} (every trial failed)"
                    )
                continue  # the stage's slots went to lines that failed: the next stage takes who is left
            return self._continue(context, waiting[0], stage, sizes, last)
        raise SearchDone(f"successive halving done: stages {sizes} over {units} units of compute")

    def _draft(self, context: ProposalContext, move: Move, sizes: list[int], last: bool) -> Proposal:
        seconds, budget = trial_budget(context, self.max_steps, self._share(context, sizes, last))
        schedule = (
            dict(STABLE) if not last else {"lr_scheduler_type": "constant", "cooldown_ratio": COOLDOWN_RATIO}
        )
        return Proposal(
            hypothesis=f"successive halving, stage 0 of {len(sizes)}: a line of {move.recipe} at learning rate "
            f"{move.lr:.3g} ({move.why}) is among the best {sizes[1] if len(sizes) > 1 else 1} of {sizes[0]}.",
            rationale=f"Start {sizes[0]} lines at a constant rate, keep the better half by valid score at each "
            f"stage (stages {sizes}), continue the survivors with their optimizer, cool down once at the end.",
            recipe=move.recipe,
            hyperparameters={"learning_rate": move.lr, **move.extra, **schedule, **budget},
            parent=None,
            operator="draft",
            estimated_cost_s=seconds,
        )

    def _continue(
        self, context: ProposalContext, line: Line, stage: int, sizes: list[int], last: bool
    ) -> Proposal:
        head = line.head
        seconds, budget = trial_budget(context, self.max_steps, self._share(context, sizes, last))
        lr = float(head.proposal.hyperparameters.get("learning_rate", 1e-4))
        schedule = {**CONTINUED, **({"cooldown_ratio": COOLDOWN_RATIO} if last else {})}
        step = "cooled down to zero over its second half" if last else "at the same constant rate"
        return Proposal(
            hypothesis=f"successive halving, stage {stage} of {len(sizes)}: {head.trial_id}'s line "
            f"(valid {line.score:.3f}) trained on {step} keeps improving.",
            rationale=f"{head.trial_id} is among the best {sizes[stage]} lines after stage {stage - 1}; its "
            "optimizer's moments carry on, no new warm-up.",
            recipe=head.proposal.recipe,
            hyperparameters={
                "learning_rate": lr,
                **carried(head.proposal.hyperparameters, head.proposal.recipe),
                **schedule,
                **budget,
            },
            parent=head.trial_id,
            operator="improve",
            estimated_cost_s=seconds,
        )

    def _share(self, context: ProposalContext, sizes: list[int], last: bool) -> float:
        """One unit, except the last stage's line, which takes every unit left."""
        if not last or not context.trial_seconds or context.compute_left_s is None:
            return 1.0
        return max(1.0, context.compute_left_s / context.trial_seconds)
