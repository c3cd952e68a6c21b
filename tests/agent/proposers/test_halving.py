"""Successive halving over continuations: drafts at a constant rate, the better half continued with its optimizer,
the last line cooled down once with every unit left; derived from the trials alone, so a resumed run goes on."""

from __future__ import annotations

import pytest

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.proposers.base import SearchDone
from agent.proposers.halving import HalvingProposer, stage_sizes


@pytest.mark.parametrize(
    ("units", "sizes"),
    [(1, [1]), (2, [1]), (3, [2, 1]), (4, [2, 1]), (5, [3, 1]), (8, [4, 2, 1]), (12, [6, 3, 2, 1])],
)
def test_stages_halve_the_lines_and_leave_the_last_one_at_least_a_unit(units: int, sizes: list[int]) -> None:
    assert stage_sizes(units) == sizes
    assert sum(sizes) <= units


def _context(trials: list[TrialRecord], compute_left: float) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=0.05,
        baseline_valid_score=0.05,
        best_score=None,
        best_trial_id=None,
        trials=trials,
        trials_left=5 - len(trials),
        seconds_left=3600.0,
        recipes=["sft"],
        trial_seconds=20.0,
        compute_left_s=compute_left,
    )


def _record(index: int, proposal: Proposal, valid: float | None, status: str = "succeeded") -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{index:02d}",
        index=index,
        proposal=proposal,
        status=status,  # type: ignore[arg-type]
        valid_score=valid,
        valid_ci_low=None if valid is None else valid - 0.03,
        valid_ci_high=None if valid is None else valid + 0.03,
        duration_s=18.0,
        validation_s=2.0,
        checkpoint=f"trials/t{index:02d}/output" if status == "succeeded" else None,
    )


def test_a_five_unit_run_drafts_three_lines_then_cools_the_best_down_with_the_rest() -> None:
    proposer = HalvingProposer()
    trials: list[TrialRecord] = []
    valid = {1: 0.20, 2: 0.35, 3: 0.10}
    for index in (1, 2, 3):
        proposal = proposer.propose(_context(trials, compute_left=100.0 - 20.0 * len(trials)))
        hp = proposal.hyperparameters
        assert proposal.init_from is None and proposal.operator == "draft"
        assert hp["lr_scheduler_type"] == "constant" and hp["max_seconds"] == 20.0 and hp["max_steps"] is None
        assert "cooldown_ratio" not in hp
        trials.append(_record(index, proposal, valid[index]))
    rates = [t.proposal.hyperparameters["learning_rate"] for t in trials]
    assert len(set(rates)) == 3  # three lines, three rates (the default, larger, smaller)

    last = proposer.propose(_context(trials, compute_left=40.0))
    hp = last.hyperparameters
    assert last.init_from == "t02" and last.operator == "improve"  # the best line by valid score
    assert hp["resume_optimizer"] is True and hp["warmup_ratio"] == 0.0 and hp["cooldown_ratio"] == 0.5
    assert (
        hp["max_seconds"] == 40.0 and hp["learning_rate"] == rates[1]
    )  # every unit left, the line's own rate
    trials.append(_record(4, last, 0.5))
    with pytest.raises(SearchDone, match="successive halving done"):
        proposer.propose(_context(trials, compute_left=0.0))


def test_a_line_that_fails_drops_out_and_the_next_best_goes_on() -> None:
    proposer = HalvingProposer()
    trials: list[TrialRecord] = []
    for index, (valid, status) in enumerate(
        [(0.3, "succeeded"), (None, "failed"), (0.2, "succeeded")], start=1
    ):
        proposal = proposer.propose(_context(trials, compute_left=100.0 - 20.0 * len(trials)))
        trials.append(_record(index, proposal, valid, status))
    assert proposer.propose(_context(trials, compute_left=40.0)).init_from == "t01"
    failed_all = [_record(i, t.proposal, None, "failed") for i, t in enumerate(trials, start=1)]
    with pytest.raises(SearchDone, match="no line survived"):
        proposer.propose(_context(failed_all, compute_left=40.0))


def test_a_budget_larger_than_the_drafts_goes_to_the_lines_not_to_an_early_stop() -> None:
    """Twenty units with three distinct drafts (one recipe at three rates): the drafts stage is the three there are,
    the later stages and the last line take the rest; before, the stage was sized for ten drafts and the run stopped
    after the three ('no draft left'), having spent 94 s of 320 (the ladder's arith-x4, 2026-12-07)."""
    proposer = HalvingProposer()
    trials: list[TrialRecord] = []
    spent = 0.0
    for index in range(1, 30):
        try:
            proposal = proposer.propose(_context(trials, compute_left=400.0 - spent))
        except SearchDone as done:
            assert "successive halving done" in str(done)
            break
        seconds = float(proposal.hyperparameters["max_seconds"])
        trials.append(_record(index, proposal, 0.1 + 0.01 * index))
        spent += seconds
    drafts = [t for t in trials if t.proposal.init_from is None]
    assert len(drafts) == 3 and len(trials) > 3
    assert spent == pytest.approx(400.0)  # every unit trained, the last line's included
    assert "cooldown_ratio" in trials[-1].proposal.hyperparameters
    assert stage_sizes(20, max_first=3) == [3, 2, 1]
