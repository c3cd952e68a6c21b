"""The line policy: one line of the moves the data call for, trained as one run would be; branches only where the
budget pays for them.

1. **The data first** (agent.proposers.data_moves). The moves the train rows call for go into the line together (a
   filter and a reformat at once, not a line each). Where most rows are prompts without an answer the route has
   two stages: the supervised recipe on the labelled rows, then a recipe that learns from prompts alone (rft first)
   on all of them; the first stage gets the labelled rows' share of the budget, at least one trial's worth and at
   most half.
2. **A line costs what one run costs.** A stage is one schedule, warmed up once and decayed once over its whole
   budget. Where it is cut into trials (at a probe's branch point, or because the run fixes a trial count), each
   trial continues the one before: its checkpoint, its optimizer's moments (`resume_optimizer`) and the next part
   of the same schedule (`schedule_from`, `schedule_to`). With nothing to decide, a stage is one trial: on a task
   whose data call for nothing, the line is the default recipe run once with the whole budget.
3. **Probes** (population-based training's explore and exploit), only where the budget holds them: `PROBE_SHARE`
   of it, one trial's seconds each. A probe branches from the line's head at another rate (2x, then 0.5x), then
   without each data move (an ablation), for one trial beside the line's own next trial over the same part of the
   schedule, so the two compare at equal steps; the better by valid score carries the line on, and the other's
   compute is what looking cost.

The plan is derived from the run's budget and the trials so far at every proposal (nothing else is kept), so a
resumed run goes on where it stopped. A trial that fails is retried once with half the rate and batch; a step that
fails twice is passed over.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from agent.core import Operator, Proposal, ProposalContext, TrialRecord
from agent.proposers.base import ProposerBase, SearchDone
from agent.proposers.builtin import default_rates, trial_budget, value
from agent.proposers.data_moves import DataReport, carried, data_report, takes_row_moves

PROBE_SHARE = (
    0.15  # of the budget, at most, spent on probes (each one trial's worth): none under 7 trials' worth
)
PROBE_RATES = (2.0, 0.5)
PROMPT_RECIPES = ("rft", "grpo", "opo")  # learn from prompts alone, in the order a route tries them
FIRST_STAGE_MAX = 0.5  # of the budget, at most, for a route's supervised stage
CONTINUE = {"resume_optimizer": True}


class WaitForTrials(Exception):  # noqa: N818 - a signal: the next step needs trials that are still running
    """Raised when the next step starts from a trial that has not finished (concurrent trials)."""


@dataclass(frozen=True)
class Stage:
    """A recipe with its train-row choices, trained as one schedule over `units` trials' worth of compute."""

    recipe: str
    moves: dict[str, Any]
    units: int
    why: str


@dataclass(frozen=True)
class Step:
    """One trial of the plan: a part of a stage's schedule, on the line or as a probe beside it."""

    stage: int
    start: int  # the stage's units covered: [start, end)
    end: int
    probe: str | None = None  # what the probe changes (None: the line's own trial)
    rate: float = 1.0  # the probe's rate, as a multiple of the line's
    drop: str | None = None  # an ablation's data move left out


@dataclass(frozen=True)
class Plan:
    stages: tuple[Stage, ...]
    steps: tuple[Step, ...]
    units: int
    notes: tuple[str, ...] = ()

    def text(self) -> str:
        route = " then ".join(f"{s.recipe}{_moves_text(s.moves)} ({_worth(s.units)})" for s in self.stages)
        probes = sum(1 for s in self.steps if s.probe)
        return f"{route}; {probes} probe{'s' if probes != 1 else ''} in {_worth(self.units)}"


def _worth(units: int) -> str:
    return "1 trial's worth" if units == 1 else f"{units} trials' worth"


def _moves_text(moves: dict[str, Any]) -> str:
    return f" with {', '.join(f'{k}={v}' for k, v in moves.items())}" if moves else ""


def stages_for(report: DataReport, recipes: list[str], units: int) -> tuple[Stage, ...]:
    """The route the data call for: the supervised recipe with every data move, or, where most rows have no answer,
    that recipe on the labelled rows then a prompt learner on all of them (the prompt learner alone when there is
    no room for two stages or no labelled row)."""
    supervised = "sft" if "sft" in recipes else recipes[0]
    moves: dict[str, Any] = {}
    if takes_row_moves(supervised):
        for move in report.moves:
            moves.update(move.fields)
    why = "; ".join(m.why for m in report.moves) or "the data call for no move"
    learner = next((r for r in PROMPT_RECIPES if r in recipes and r != supervised), None)
    if not report.prompts_only or learner is None:
        return (Stage(supervised, moves, units, f"{supervised}: {why}"),)
    labelled = 1.0 - report.unlabelled_share
    prompt_moves = {k: v for k, v in moves.items() if takes_row_moves(learner)}
    prompts = (
        f"{report.unlabelled_share:.0%} of the rows are prompts without an answer: {learner} learns from them"
    )
    if units < 2 or labelled <= 0.0:
        return (Stage(learner, prompt_moves, units, prompts),)
    first = min(max(1, round(units * labelled)), max(1, int(units * FIRST_STAGE_MAX)))
    return (
        Stage(supervised, moves, first, f"{supervised} on the labelled {labelled:.0%} first ({why})"),
        Stage(learner, prompt_moves, units - first, f"then {prompts}"),
    )


def plan_for(report: DataReport, recipes: list[str], units: int, one_trial_per_unit: bool) -> Plan:
    """The whole plan for `units` trials' worth of compute. `one_trial_per_unit`: the run fixes trials, not seconds,
    so every trial is one unit (a stage is cut into as many trials as its units)."""
    probes = probe_count(units)
    stages = list(stages_for(report, recipes, units - probes))
    last = stages[-1]
    candidates: list[tuple[str, float, str | None]] = [
        (f"{rate:g}x the line's rate", rate, None) for rate in PROBE_RATES
    ]
    candidates += [(f"the line without {key}={value}", 1.0, key) for key, value in last.moves.items()]
    probes = min(probes, len(candidates), max(0, last.units - 1))
    unused = probe_count(units) - probes
    if unused:  # probes the last stage has no room or no candidate for: its line gets the compute
        stages[-1] = Stage(last.recipe, last.moves, last.units + unused, last.why)
    steps: list[Step] = []
    for index, stage in enumerate(stages):
        mine = probes if index == len(stages) - 1 else 0
        if one_trial_per_unit:
            cuts = list(range(stage.units + 1))
        else:  # one trial per part between branch points: the first unit, each probed unit, then the rest
            cuts = sorted({0, *range(1, mine + 2), stage.units} if mine else {0, stage.units})
            cuts = [c for c in cuts if c <= stage.units]
        for start, end in zip(cuts, cuts[1:], strict=False):
            steps.append(Step(index, start, end))
            if 1 <= start <= mine:
                what, rate, drop = candidates[start - 1]
                steps.append(Step(index, start, end, probe=what, rate=rate, drop=drop))
    notes = tuple(report.notes)
    return Plan(tuple(stages), tuple(steps), units, notes)


@dataclass
class Progress:
    """Where the plan stands after the trials so far: each step's trial (None: not run, or passed over)."""

    trial_of: dict[int, TrialRecord] = field(default_factory=dict)
    tries: dict[int, list[TrialRecord]] = field(default_factory=dict)

    def spent(self, index: int) -> bool:
        tries = self.tries.get(index, [])
        return index in self.trial_of or len(tries) >= 2


def replay(plan: Plan, trials: list[TrialRecord]) -> Progress:
    """Match the trials, in order, to the plan's steps: each trial is the first step not spent yet (a step is spent
    by a trial that succeeded or is running, or by two that did not)."""
    progress = Progress()
    for trial in sorted(trials, key=lambda t: t.index):
        index = next((i for i in range(len(plan.steps)) if not progress.spent(i)), None)
        if index is None:
            break
        progress.tries.setdefault(index, []).append(trial)
        if trial.status in ("succeeded", "pending", "running"):
            progress.trial_of[index] = trial
    return progress


def _ready(trial: TrialRecord) -> bool:
    return trial.status == "succeeded" and value(trial) is not None


class LineProposer(ProposerBase):
    """One line of the data's moves as one run; probes where the budget holds them (module docstring)."""

    name = "lines"

    def __init__(self, max_steps: int | None = None, name: str = "lines") -> None:
        self.max_steps = max_steps
        self.name = name

    @staticmethod
    def units(context: ProposalContext) -> tuple[int, bool]:
        """The run's compute in trials' worth (what was spent plus what is left, over one trial's seconds), and
        whether the run fixes trials rather than seconds."""
        if context.trial_seconds and context.compute_left_s is not None:
            spent = sum(t.wall_s for t in context.trials)
            return max(1, round((spent + context.compute_left_s) / context.trial_seconds)), False
        return max(1, len(context.trials) + context.trials_left), True

    def plan(self, context: ProposalContext) -> Plan:
        units, per_trial = self.units(context)
        report = data_report(context.workspace, context.benchmark)
        return plan_for(report, context.recipes or ["sft", "grpo"], units, per_trial)

    def propose(self, context: ProposalContext) -> Proposal:
        plan = self.plan(context)
        progress = replay(plan, context.trials)
        index = next((i for i in range(len(plan.steps)) if not progress.spent(i)), None)
        if index is None:
            raise SearchDone(f"the plan is done: {plan.text()}")
        step = plan.steps[index]
        head, rate, moves = self._head(plan, progress, step, default_rates(context))
        tries = progress.tries.get(index, [])
        proposal = self._proposal(context, plan, step, head, rate, moves, retry=tries[-1] if tries else None)
        sibling = self._sibling(plan, progress, step)
        steps = sibling.train_metrics.get("steps") if sibling is not None else None
        if sibling is not None and steps:  # a probe compares with the line's own trial at equal steps
            cap = proposal.hyperparameters.get("max_steps")
            proposal.hyperparameters["max_steps"] = int(steps) if cap is None else min(int(cap), int(steps))
            proposal.rationale += f" Capped at the {int(steps)} steps {sibling.trial_id} took: equal steps."
        return proposal

    @staticmethod
    def _sibling(plan: Plan, progress: Progress, step: Step) -> TrialRecord | None:
        """For a probe, the line's own trial over the same part of the schedule, once it has succeeded."""
        if step.probe is None:
            return None
        for index, other in enumerate(plan.steps):
            if (other.stage, other.start, other.probe) == (step.stage, step.start, None):
                trial = progress.trial_of.get(index)
                return trial if trial is not None and trial.status == "succeeded" else None
        return None

    def _head(
        self, plan: Plan, progress: Progress, step: Step, rates: dict[str, float]
    ) -> tuple[TrialRecord | None, float, dict[str, Any]]:
        """The trial `step` starts from (None: the base model), and the line's rate and train-row choices there.
        Walking the plan's earlier steps, part by part: where a probe ran beside the line's own trial, the better
        of the two by valid score carries the line (the line's on a tie); a new stage starts from the end of the
        one before, at its own recipe's rate and moves."""
        stage = plan.stages[step.stage]
        head: TrialRecord | None = None
        groups: dict[tuple[int, int], list[tuple[Step, TrialRecord | None]]] = {}
        for index, earlier in enumerate(plan.steps):
            if (earlier.stage, earlier.start) >= (step.stage, step.start):
                break
            groups.setdefault((earlier.stage, earlier.start), []).append(
                (earlier, progress.trial_of.get(index))
            )
        for group in groups.values():
            running = [t for _, t in group if t is not None and t.status != "succeeded"]
            if running:
                raise WaitForTrials(f"{running[0].trial_id} is still running")
            ready = [t for _, t in group if t is not None and _ready(t)]
            if ready:  # max keeps the first of equals: the line's own trial comes before its probe
                head = max(ready, key=lambda t: value(t) or 0.0)
        if (
            head is None or head.proposal.recipe != stage.recipe
        ):  # the base, or a new stage: its own rate, moves
            return head, rates.get(stage.recipe, 1e-4), dict(stage.moves)
        return (
            head,
            _rate(head, rates.get(stage.recipe, 1e-4)),
            carried(head.proposal.hyperparameters, stage.recipe),
        )

    def _proposal(
        self,
        context: ProposalContext,
        plan: Plan,
        step: Step,
        head: TrialRecord | None,
        rate: float,
        moves: dict[str, Any],
        retry: TrialRecord | None,
    ) -> Proposal:
        stage = plan.stages[step.stage]
        share = float(step.end - step.start)
        last_of_stage = step.end == stage.units
        if (
            last_of_stage and step.stage == len(plan.stages) - 1 and step.probe is None
        ):  # the line's end: all left
            share = max(share, (context.compute_left_s or 0.0) / (context.trial_seconds or 1.0))
        seconds, budget = trial_budget(context, self.max_steps, share)
        hyper: dict[str, Any] = {"learning_rate": rate * step.rate}
        retried = ""
        if retry is not None:
            hyper["learning_rate"] *= 0.5
            batch = int(retry.proposal.hyperparameters.get("per_device_train_batch_size", 32))
            hyper["per_device_train_batch_size"] = max(8, batch // 2)
            retried = f" Retry of {retry.trial_id} ({(retry.error or retry.status)[:160]}) with half the rate and batch."
        if step.drop:
            moves = {k: v for k, v in moves.items() if k != step.drop}
        hyper.update(moves)
        if (step.start, step.end) != (0, stage.units):  # a part of the stage's one schedule
            hyper.update(schedule_from=step.start / stage.units, schedule_to=step.end / stage.units)
        continues = head is not None and head.proposal.recipe == stage.recipe
        if continues:
            hyper.update(CONTINUE)
        operator: Operator = "draft" if head is None else "ablate" if step.probe else "improve"
        what = f"{stage.recipe}{_moves_text(moves)} at learning rate {hyper['learning_rate']:.3g}"
        part = (
            f"units {step.start}-{step.end} of {stage.units} of its schedule"
            if (step.start, step.end) != (0, stage.units)
            else "its whole schedule"
        )
        if step.probe:
            hypothesis = (
                f"probe beside the line: {step.probe} ({what}, from {head.trial_id if head else 'the base model'}, "
                f"{part}) beats the line's own trial over the same part at equal steps."
            )
        else:
            start = (
                f"continuing {head.trial_id}"
                if continues and head
                else f"from {head.trial_id if head else 'the base model'}"
            )
            hypothesis = f"the line, stage {step.stage + 1} of {len(plan.stages)}: {what}, {start}, {part}."
        rationale = f"Plan: {plan.text()}. This stage: {stage.why}.{retried}"
        if retry is not None:
            operator = "debug"
        if context.feedback:
            rationale += f" A reviewer rejected the last proposal: {context.feedback!r}."
        return Proposal(
            hypothesis=hypothesis,
            rationale=rationale,
            recipe=stage.recipe,
            hyperparameters={**hyper, **budget},
            parent=head.trial_id if head else None,
            operator=operator,
            estimated_cost_s=seconds,
        )


def _rate(trial: TrialRecord, default: float) -> float:
    return float(trial.proposal.hyperparameters.get("learning_rate", default))


def probe_count(units: int) -> int:
    """How many probes `units` trials' worth of compute holds (before the plan's own limits)."""
    return math.floor(units * PROBE_SHARE)
