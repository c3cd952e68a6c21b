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


def test_a_trial_never_gets_more_compute_than_is_left_and_a_remnant_ends_the_run() -> None:
    """Equal compute for every policy: a trial of several trials' worth, or one after trials that overran, is cut to
    what `--max-compute-s` leaves; a remnant too short to train in ends the run instead of buying a full trial."""
    from agent.proposers.base import SearchDone
    from agent.proposers.builtin import trial_budget

    def timed(left: float) -> ProposalContext:
        return _ctx([], None, None).model_copy(update={"trial_seconds": 16.0, "compute_left_s": left})

    assert trial_budget(timed(80.0), None, share=2.0)[1]["max_seconds"] == 32.0
    assert trial_budget(timed(17.2), None, share=2.0)[1]["max_seconds"] == 17.2
    assert (
        trial_budget(timed(9.0), None)[1]["max_seconds"] == 9.0
    )  # was a whole 16-s trial: 7 s over the budget
    try:
        trial_budget(timed(1.5), None)
    except SearchDone as done:
        assert "1.5 s of trial compute left" in str(done)
    else:
        raise AssertionError("a 1.5-s remnant bought a trial")
