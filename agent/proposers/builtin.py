"""The built-in proposer: a small, explainable hill-climber over recipes and learning rates.

It needs no LLM. It reads what earlier trials scored and decides like a careful researcher would: start with SFT,
keep training the best checkpoint while that pays off (annealing the learning rate), probe another learning rate
when progress stalls, move to RL (GRPO, then OPO, DPO, GAD) from the best checkpoint when supervised training has
plateaued, and back off after a crash or a reviewer's rejection.

It judges trials by their free valid score when the loop has one (agent.loop.validation; a checkpoint the submission
policy kept from the grader has no public score), by the grader's public score otherwise, and stops the run once the
best checkpoint's valid CI lower bound reaches the ceiling. This greedy cascade is `--proposer greedy`;
`agent.proposers.tree` is the search-tree policy over the same recipes.
"""

from __future__ import annotations

from agent.core import CEILING, Operator, Proposal, ProposalContext, TrialRecord
from agent.proposers.base import ProposerBase, SearchDone

DEFAULT_LR = {"sft": 1e-3, "grpo": 1e-4, "opo": 1e-4, "dpo": 5e-5, "gad": 1e-4, "rft": 1e-3}
RL_CYCLE = (
    "rft",
    "grpo",
    "opo",
    "dpo",
    "gad",
)  # tried in turn, from the best checkpoint, when supervised training stalls
MIN_TRIAL_SECONDS = 20.0
REMNANT_SHARE = 0.25  # compute left under this share of `trial_seconds` is too short for a trial
MAX_TRIAL_SECONDS = 90.0
GRADING_RESERVE_S = (
    10.0  # time kept back per trial for the grader's scoring (a trial's own wall covers the rest)
)


def default_rates(context: ProposalContext | None = None) -> dict[str, float]:
    """Each recipe's draft rate: DEFAULT_LR, tuned on the models rlloop builds, or the rate that fits the run's
    base model where the loop gives one (`ProposalContext.recipe_defaults`, from trainers.model_fit)."""
    rates = dict(DEFAULT_LR)
    for recipe, defaults in (context.recipe_defaults if context is not None else {}).items():
        if isinstance(defaults.get("learning_rate"), int | float):
            rates[recipe] = float(defaults["learning_rate"])
    return rates


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def value(trial: TrialRecord) -> float | None:
    """What a trial is judged by: its valid score, else its public score."""
    return trial.valid_score if trial.valid_score is not None else trial.score


def _succeeded(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.status == "succeeded" and value(t) is not None]


def _baseline(context: ProposalContext) -> float | None:
    """The base model's score on the same scale as the trials' (valid when any trial was validated)."""
    validated = any(t.valid_score is not None for t in context.trials)
    if validated and context.baseline_valid_score is not None:
        return context.baseline_valid_score
    return context.baseline_score


def _best(trials: list[TrialRecord]) -> TrialRecord | None:
    """The best succeeded trial by `value` (the earlier one on ties); flagged submissions never count."""
    best: TrialRecord | None = None
    for trial in _succeeded(trials):
        if trial.grading.get("flags"):
            continue
        if best is None or (value(trial) or 0.0) > (value(best) or 0.0):
            best = trial
    return best


def _stall_count(trials: list[TrialRecord], baseline: float | None) -> int:
    """How many scored trials in a row failed to beat the best score seen before them (the baseline included)."""
    best = baseline if baseline is not None else float("-inf")
    stall = 0
    for trial in _succeeded(trials):
        score = value(trial)
        assert score is not None
        if score > best:
            best, stall = score, 0
        else:
            stall += 1
    return stall


def trial_budget(
    context: ProposalContext, max_steps: int | None, share: float = 1.0
) -> tuple[float, dict[str, float | int | None]]:
    """(wall seconds for the next trial, its budget hyperparameters). A time-boxed trial gets `max_seconds`, its
    wall budget from start to checkpoint (validation kept back by the loop), and no step count: its schedule follows
    those seconds. They are the run's `trial_seconds` when it fixes them (equal compute for every policy, `max_steps`
    a cap if also set) times `share` (a policy may spend several trials' worth in one, within the compute left);
    else a fixed step count when `max_steps` is set (reproducible); else a share of the time left. Every built-in
    policy spends compute the same way."""
    budget: dict[str, float | int | None] = {"seed": context.seed + len(context.trials)}
    if context.trial_seconds is not None:
        seconds = context.trial_seconds * share
        if context.compute_left_s is not None:
            # never more than is left, so every policy spends the same compute; a remnant too short to train in
            # (start-up would be most of it) ends the run instead
            if context.compute_left_s < context.trial_seconds * REMNANT_SHARE:
                raise SearchDone(
                    f"{context.compute_left_s:.1f} s of trial compute left, under {REMNANT_SHARE:.0%} of a "
                    f"{context.trial_seconds:g}-s trial"
                )
            seconds = min(seconds, context.compute_left_s)
        budget.update(max_seconds=round(seconds, 1), max_steps=max_steps)
        return seconds, budget
    per_trial = context.seconds_left / max(context.trials_left, 1) - GRADING_RESERVE_S
    seconds = max(MIN_TRIAL_SECONDS, min(per_trial, context.max_trial_seconds or MAX_TRIAL_SECONDS))
    if max_steps is not None:
        budget["max_steps"] = max_steps
    else:
        budget.update(max_seconds=round(seconds, 1), max_steps=None)
    return seconds, budget


def _lr(proposal: Proposal, rates: dict[str, float] = DEFAULT_LR) -> float:
    return float(proposal.hyperparameters.get("learning_rate", rates.get(proposal.recipe, 1e-4)))


class BuiltinProposer(ProposerBase):
    """Chooses recipe, learning rate, start checkpoint and time budget from the scores so far."""

    name = "builtin"

    def __init__(self, rl_after_stalls: int = 2, max_steps: int | None = None, name: str = "builtin") -> None:
        self.name = name
        self.rl_after_stalls = rl_after_stalls
        self.max_steps = max_steps  # fixed steps make trials reproducible; otherwise they are time-boxed

    @staticmethod
    def _menu(context: ProposalContext) -> tuple[str, list[str]]:
        """(the recipe to start with, the RL recipes in the order to try them) among those the run allows: the
        supervised one, or, where most train rows have no answer, the first that learns from prompts alone."""
        from agent.proposers.data_moves import data_report

        allowed = context.recipes or ["sft", "grpo"]
        supervised = "sft" if "sft" in allowed else allowed[0]
        rl = [r for r in RL_CYCLE if r in allowed and r != supervised]
        if rl and data_report(context.workspace, context.benchmark).prompts_only:
            return rl[0], [r for r in [*rl[1:], supervised]]
        return supervised, rl

    def _budget(self, context: ProposalContext) -> tuple[float, dict[str, float | int | None]]:
        return trial_budget(context, self.max_steps)

    def propose(self, context: ProposalContext) -> Proposal:
        return self._with_rows(self._propose(context), context)

    @staticmethod
    def _with_rows(proposal: Proposal, context: ProposalContext) -> Proposal:
        """The train-row choices of the proposal: a line keeps its parent's; a draft takes the first the data call
        for (agent.proposers.data_moves)."""
        from agent.proposers.data_moves import carried, data_report, takes_row_moves

        if not takes_row_moves(proposal.recipe):
            return proposal
        parent = next((t for t in context.trials if t.trial_id == proposal.init_from), None)
        if parent is not None:
            rows = carried(parent.proposal.hyperparameters, parent.proposal.recipe)
        else:
            found = data_report(context.workspace, context.benchmark).moves
            rows = dict(found[0].fields) if found else {}
        if not rows:
            return proposal
        return proposal.model_copy(update={"hyperparameters": {**proposal.hyperparameters, **rows}})

    def _propose(self, context: ProposalContext) -> Proposal:
        seconds, budget = self._budget(context)
        rates = default_rates(context)
        supervised, rl_recipes = self._menu(context)
        trials = context.trials
        note = ""
        if context.feedback:
            note = f" A reviewer rejected the last proposal: {context.feedback!r}; taking a more conservative step."

        def proposal(
            hypothesis: str,
            rationale: str,
            recipe: str,
            lr: float,
            init_from: str | None,
            operator: Operator | None = None,
            **extra: int,
        ) -> Proposal:
            return Proposal(
                hypothesis=hypothesis,
                rationale=rationale + note,
                recipe=recipe,
                hyperparameters={"learning_rate": lr, **extra, **budget},
                init_from=init_from,
                operator=operator or ("draft" if init_from is None else "improve"),
                estimated_cost_s=seconds,
            )

        if not trials:
            return proposal(
                "Supervised fine-tuning on the train split lifts accuracy over the weak base model.",
                "No trials yet: SFT is the cheapest reliable first step.",
                supervised,
                rates.get(supervised, 1e-4),
                None,
            )

        top = _best(trials)
        if top is not None and top.valid_ci_low is not None and top.valid_ci_low >= CEILING:
            raise SearchDone(
                f"score at its ceiling: {top.trial_id} valid {top.valid_score:.3f} "
                f"(95% CI low {top.valid_ci_low:.3f} >= {CEILING})"
            )
        last = trials[-1]
        if last.status in ("failed", "rejected"):
            batch = int(last.proposal.hyperparameters.get("per_device_train_batch_size", 32))
            recipe = last.proposal.recipe if last.proposal.recipe in DEFAULT_LR else supervised
            return proposal(
                f"{last.trial_id} did not finish ({(last.error or last.status)[:160]}); the same direction with a "
                "smaller learning rate and batch trains stably.",
                "Back off after a failed trial instead of abandoning the direction.",
                recipe,
                _lr(last.proposal, rates) * 0.5,
                last.proposal.init_from,
                "debug",
                per_device_train_batch_size=max(8, batch // 2),
            )

        baseline = _baseline(context)
        stalls = _stall_count(trials, baseline)
        best_score = value(top) if top is not None else None
        beats_base = best_score is not None and (baseline is None or best_score > baseline)
        best_trial = top.trial_id if beats_base and top else None  # nothing beat the base yet: start from it
        parent = next((t for t in _succeeded(trials) if t.trial_id == best_trial), None)
        parent_recipe = parent.proposal.recipe if parent else supervised
        parent_lr = _lr(parent.proposal, rates) if parent else rates.get(supervised, 1e-4)

        if stalls == 0:
            return proposal(
                f"{best_trial} improved the score to {_score(best_score)}; training it further with an "
                "annealed learning rate keeps improving.",
                "Exploit: the last step paid off, so continue from the best checkpoint.",
                parent_recipe,
                parent_lr * (0.7 if parent_recipe == supervised else 1.0),
                best_trial,
            )

        recent = {t.proposal.recipe for t in trials[-stalls:]}
        untried_rl = [r for r in rl_recipes if r not in recent]
        if beats_base and stalls >= self.rl_after_stalls and untried_rl:
            recipe = untried_rl[0]
            return proposal(
                f"Supervised training has plateaued; on-policy RL ({recipe}) on the exact-match reward from the best "
                "checkpoint fixes the remaining systematic errors.",
                f"{stalls} trials without improvement: change the learning signal, not the step size.",
                recipe,
                rates.get(recipe, 1e-4),
                best_trial,
            )

        tried_lrs = {
            round(_lr(t.proposal, rates), 12)
            for t in trials
            if t.proposal.init_from == best_trial and t.proposal.recipe == parent_recipe
        }
        up, down = parent_lr * 2.0, parent_lr * 0.3
        lr = up if round(up, 12) not in tried_lrs and not context.feedback else down
        direction = "larger" if lr > parent_lr else "smaller"
        target = _score(best_score if beats_base else baseline)
        return proposal(
            f"The last trial did not beat {target}; a {direction} learning rate from {best_trial or 'the base model'} "
            "escapes the plateau.",
            f"Explore the learning rate around the best trial ({stalls} without improvement).",
            parent_recipe,
            lr,
            best_trial,
        )
