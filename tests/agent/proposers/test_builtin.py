"""The built-in proposer decides from scores: exploit on improvement, explore on stalls, back off on failure."""

from __future__ import annotations

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.proposers.builtin import BuiltinProposer


def _ctx(
    trials: list[TrialRecord], best: float | None, best_id: str | None, baseline: float = 0.2
) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=baseline,
        best_score=best,
        best_trial_id=best_id,
        trials=trials,
        trials_left=4 - len(trials),
        seconds_left=600.0,
        recipes=["sft", "grpo"],
    )


def _trial(
    i: int,
    score: float | None,
    status: str = "succeeded",
    lr: float = 1e-3,
    init: str | None = None,
    recipe: str = "sft",
) -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{i:02d}",
        index=i,
        proposal=Proposal(
            hypothesis="h", recipe=recipe, hyperparameters={"learning_rate": lr}, init_from=init
        ),
        status=status,  # type: ignore[arg-type]
        score=score,
        checkpoint=f"trials/t{i:02d}/output" if status == "succeeded" else None,
        error=None if status == "succeeded" else "exited with code 1",
    )


def test_first_trial_is_sft_from_base_within_budget() -> None:
    proposal = BuiltinProposer().propose(_ctx([], None, None))
    assert proposal.recipe == "sft" and proposal.init_from is None
    assert 0 < proposal.hyperparameters["max_seconds"] <= 600 / 4


def test_improvement_continues_from_best_with_annealed_lr() -> None:
    trials = [_trial(1, 0.6)]
    proposal = BuiltinProposer().propose(_ctx(trials, 0.6, "t01"))
    assert proposal.init_from == "t01"
    assert proposal.hyperparameters["learning_rate"] < 1e-3


def test_stall_explores_a_different_learning_rate_from_best() -> None:
    trials = [_trial(1, 0.6), _trial(2, 0.55, lr=7e-4, init="t01")]
    proposal = BuiltinProposer().propose(_ctx(trials, 0.6, "t01"))
    assert proposal.init_from == "t01"
    assert proposal.hyperparameters["learning_rate"] not in (7e-4,)


def test_repeated_stalls_switch_to_rl_recipes_in_turn() -> None:
    trials = [_trial(1, 0.6), _trial(2, 0.55, init="t01"), _trial(3, 0.58, lr=2e-3, init="t01")]
    context = _ctx(trials, 0.6, "t01")
    context.recipes = ["sft", "grpo", "opo", "dpo"]
    proposal = BuiltinProposer().propose(context)
    assert proposal.recipe == "grpo" and proposal.init_from == "t01"
    trials.append(_trial(4, 0.59, init="t01", recipe="grpo", lr=1e-4))
    context = _ctx(trials, 0.6, "t01")
    context.recipes = ["sft", "grpo", "opo", "dpo"]
    assert BuiltinProposer().propose(context).recipe == "opo"


def test_nothing_beats_the_baseline_keeps_starting_from_base() -> None:
    trials = [_trial(1, 0.1)]
    proposal = BuiltinProposer().propose(_ctx(trials, 0.1, "t01", baseline=0.2))
    assert proposal.init_from is None and proposal.recipe == "sft"


def test_fixed_steps_make_trials_reproducible() -> None:
    proposal = BuiltinProposer(max_steps=25).propose(_ctx([], None, None))
    assert proposal.hyperparameters["max_steps"] == 25 and "max_seconds" not in proposal.hyperparameters


def test_failure_backs_off() -> None:
    trials = [_trial(1, None, status="failed", lr=1e-3)]
    proposal = BuiltinProposer().propose(_ctx(trials, None, None))
    assert proposal.hyperparameters["learning_rate"] == 5e-4
    assert "t01" in proposal.hypothesis
