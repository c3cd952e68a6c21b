"""The built-in proposer: a small, explainable hill-climber over recipes and learning rates.

It needs no LLM. It reads what earlier trials scored and decides like a careful researcher would: start with SFT,
keep training the best checkpoint while that pays off (annealing the learning rate), probe a larger learning rate
when progress stalls, move to RL (GRPO) from the best checkpoint when supervised training has plateaued, and back off
after a crash.
"""

from __future__ import annotations

from agent.proposers.base import Proposal, ProposalContext, TrialRecord

DEFAULT_LR = {"sft": 1e-3, "grpo": 1e-4}
MIN_TRIAL_SECONDS = 20.0
EVAL_RESERVE_S = 15.0  # time kept back per trial for loading, saving and grading


def _score(value: float | None) -> str:
    return "n/a" if value is None else f"{value:.3f}"


def _succeeded(trials: list[TrialRecord]) -> list[TrialRecord]:
    return [t for t in trials if t.status == "succeeded" and t.score is not None]


def _stall_count(trials: list[TrialRecord], baseline: float | None) -> int:
    """How many scored trials in a row failed to beat the best score seen before them."""
    best = baseline if baseline is not None else float("-inf")
    stall = 0
    for trial in _succeeded(trials):
        assert trial.score is not None
        if trial.score > best:
            best, stall = trial.score, 0
        else:
            stall += 1
    return stall


class BuiltinProposer:
    """Chooses recipe, learning rate, start checkpoint and time budget from the scores so far."""

    name = "builtin"

    def __init__(self, grpo_after_stalls: int = 2, max_steps: int | None = None) -> None:
        self.grpo_after_stalls = grpo_after_stalls
        self.max_steps = max_steps  # fixed steps make trials reproducible; otherwise they are time-boxed

    def _seconds_for_trial(self, context: ProposalContext) -> float:
        per_trial = context.seconds_left / max(context.trials_left, 1) - EVAL_RESERVE_S
        return max(MIN_TRIAL_SECONDS, min(per_trial, 90.0))

    def propose(self, context: ProposalContext) -> Proposal:
        seconds = self._seconds_for_trial(context)
        budget: dict[str, float | int] = {"seed": context.seed + len(context.trials)}
        if self.max_steps is not None:
            budget["max_steps"] = self.max_steps
        else:
            budget["max_seconds"] = round(seconds, 1)
        trials = context.trials
        if context.feedback:
            note = f" A reviewer rejected the last proposal: {context.feedback!r}; taking a more conservative step."
        else:
            note = ""

        if not trials:
            return Proposal(
                hypothesis="Supervised fine-tuning on the train split lifts accuracy over the weak base model.",
                rationale="No trials yet: SFT is the cheapest reliable first step." + note,
                recipe="sft",
                hyperparameters={"learning_rate": DEFAULT_LR["sft"], **budget},
                init_from=None,
                estimated_cost_s=seconds,
            )

        last = trials[-1]
        best_trial = context.best_trial_id
        scored = _succeeded(trials)

        if last.status in ("failed", "rejected"):
            lr = (
                float(last.proposal.hyperparameters.get("learning_rate", DEFAULT_LR[last.proposal.recipe]))
                * 0.5
            )
            batch = int(last.proposal.hyperparameters.get("per_device_train_batch_size", 32))
            return Proposal(
                hypothesis=f"The failure of {last.trial_id} ({last.error or last.status}) came from an aggressive "
                "setting; a smaller learning rate and batch will train stably.",
                rationale="Back off after a failed trial instead of abandoning the direction." + note,
                recipe="sft" if last.proposal.recipe not in DEFAULT_LR else last.proposal.recipe,
                hyperparameters={
                    "learning_rate": lr,
                    "per_device_train_batch_size": max(4, batch // 2),
                    **budget,
                },
                init_from=last.proposal.init_from,
                estimated_cost_s=seconds,
            )

        stalls = _stall_count(trials, context.baseline_score)
        beats_base = context.best_score is not None and (
            context.baseline_score is None or context.best_score > context.baseline_score
        )
        if not beats_base:
            best_trial = None  # nothing beat the base model yet: keep starting from it
        parent = next((t for t in scored if t.trial_id == best_trial), None)
        parent_recipe = parent.proposal.recipe if parent else "sft"
        parent_lr = (
            float(parent.proposal.hyperparameters.get("learning_rate", DEFAULT_LR["sft"])) if parent else 1e-3
        )

        if stalls == 0:
            lr = parent_lr * (0.7 if parent_recipe == "sft" else 1.0)
            return Proposal(
                hypothesis=f"{best_trial} improved the score to {context.best_score:.3f}; training it further with an "
                "annealed learning rate keeps improving.",
                rationale="Exploit: the last step paid off, so continue from the best checkpoint." + note,
                recipe=parent_recipe,
                hyperparameters={"learning_rate": lr, **budget},
                init_from=best_trial,
                estimated_cost_s=seconds,
            )

        if (
            beats_base
            and stalls >= self.grpo_after_stalls
            and not any(t.proposal.recipe == "grpo" for t in trials[-stalls:])
        ):
            return Proposal(
                hypothesis="Supervised training has plateaued; on-policy RL (GRPO) on the exact-match reward from the "
                "best checkpoint fixes the remaining systematic errors.",
                rationale=f"{stalls} trials without improvement: change the learning signal, not the step size."
                + note,
                recipe="grpo",
                hyperparameters={"learning_rate": DEFAULT_LR["grpo"], **budget},
                init_from=best_trial,
                estimated_cost_s=seconds,
            )

        tried_lrs = {
            round(float(t.proposal.hyperparameters.get("learning_rate", 0.0)), 12)
            for t in trials
            if t.proposal.init_from == best_trial and t.proposal.recipe == parent_recipe
        }
        up, down = parent_lr * 2.0, parent_lr * 0.3
        lr = up if round(up, 12) not in tried_lrs and not context.feedback else down
        direction = "larger" if lr > parent_lr else "smaller"
        return Proposal(
            hypothesis=f"The last trial did not beat {_score(context.best_score if beats_base else context.baseline_score)}; "
            f"a {direction} learning rate from {best_trial or 'the base model'} escapes the plateau.",
            rationale=f"Explore the learning rate around the best trial ({stalls} without improvement)."
            + note,
            recipe=parent_recipe,
            hyperparameters={"learning_rate": lr, **budget},
            init_from=best_trial,
            estimated_cost_s=seconds,
        )
