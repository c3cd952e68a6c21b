"""The line policy: the data's moves together in one line, a stage trained as one run (cut only where a probe
branches, each trial continuing the one before with its optimizer and its part of the schedule), probes only where
the budget holds them; derived from the trials alone, so a resumed run goes on where it stopped."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.proposers.base import SearchDone
from agent.proposers.data_moves import DataMove, DataReport
from agent.proposers.lines import LineProposer, WaitForTrials, plan_for
from tests.agent.proposers.workspaces import train_workspace

CLEAN = DataReport()
MESSY = DataReport(
    (
        DataMove({"answer_format": "final_number"}, "sentences"),
        DataMove({"filter_by_verifier": True}, "slips"),
    )
)
FEW = DataReport(unlabelled_share=0.98)


def _context(
    trials: list[TrialRecord],
    *,
    units: int = 5,
    workspace: Path | None = None,
    benchmark: str = "arith",
    per_trial: bool = False,
) -> ProposalContext:
    spent = sum(t.wall_s for t in trials)
    return ProposalContext(
        run_id="r",
        benchmark=benchmark,
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=0.05,
        baseline_valid_score=0.05,
        best_score=None,
        best_trial_id=None,
        trials=trials,
        trials_left=units - len(trials),
        seconds_left=3600.0,
        recipes=["sft", "rft", "grpo"],
        trial_seconds=None if per_trial else 16.0,
        compute_left_s=None if per_trial else 16.0 * units - spent,
        workspace=str(workspace) if workspace else None,
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
        duration_s=14.0 * (proposal.estimated_cost_s or 16.0) / 16.0,
        validation_s=2.0 * (proposal.estimated_cost_s or 16.0) / 16.0,
        checkpoint=f"trials/t{index:02d}/output" if status == "succeeded" else None,
        error=None if status == "succeeded" else "boom",
    )


def test_clean_data_at_a_short_budget_is_the_default_recipe_run_once() -> None:
    """Nothing to decide and no room to look: one trial with the whole budget, which is (a) itself."""
    plan = plan_for(CLEAN, ["sft", "grpo"], 5, one_trial_per_unit=False)
    assert [(s.recipe, s.moves, s.units) for s in plan.stages] == [("sft", {}, 5)]
    assert [(s.start, s.end, s.probe) for s in plan.steps] == [(0, 5, None)]
    proposal = LineProposer().propose(_context([]))
    hp = proposal.hyperparameters
    assert proposal.init_from is None and hp["max_seconds"] == 80.0 and hp["learning_rate"] == 1e-3
    assert "schedule_from" not in hp and "resume_optimizer" not in hp  # the recipe's own schedule, whole


def test_every_data_move_goes_into_one_line_together() -> None:
    plan = plan_for(MESSY, ["sft", "rft", "grpo"], 5, one_trial_per_unit=False)
    assert [(s.recipe, s.moves) for s in plan.stages] == [
        ("sft", {"answer_format": "final_number", "filter_by_verifier": True})
    ]


def test_the_data_report_of_a_workspace_reaches_the_proposal(tmp_path: Path) -> None:
    workspace = train_workspace(tmp_path, "arith-messy")
    proposal = LineProposer().propose(_context([], workspace=workspace, benchmark="arith-messy"))
    hp = proposal.hyperparameters
    assert hp["answer_format"] == "final_number" and hp["filter_by_verifier"] is True
    assert "sentences" not in proposal.rationale or "answers read" in proposal.rationale


def test_prompts_without_answers_route_through_sft_then_a_prompt_learner() -> None:
    """arith-few's shape: 2% labelled. The supervised stage gets one trial's worth (its share, at least one), the
    prompt learner the rest, each stage its own schedule; the second starts where the first ended."""
    plan = plan_for(FEW, ["sft", "rft", "grpo"], 5, one_trial_per_unit=False)
    assert [(s.recipe, s.units) for s in plan.stages] == [("sft", 1), ("rft", 4)]
    proposer = LineProposer()
    proposer.plan = lambda context: plan  # type: ignore[method-assign]
    first = proposer.propose(_context([]))
    assert first.recipe == "sft" and first.init_from is None and first.hyperparameters["max_seconds"] == 16.0
    trials = [_record(1, first, 0.15)]
    second = proposer.propose(_context(trials))
    hp = second.hyperparameters
    assert second.recipe == "rft" and second.init_from == "t01" and second.operator == "improve"
    assert hp["learning_rate"] == 1e-3 and "resume_optimizer" not in hp  # another recipe: a fresh optimizer
    assert hp["max_seconds"] == pytest.approx(80.0 - trials[0].wall_s)  # all that is left
    trials.append(_record(2, second, 0.2))
    with pytest.raises(SearchDone, match="the plan is done"):
        proposer.propose(_context(trials))
    assert (
        plan_for(FEW, ["sft", "rft"], 1, one_trial_per_unit=False).stages[0].recipe == "rft"
    )  # no room: RFT


def test_a_larger_budget_probes_the_rate_beside_the_line_and_keeps_the_better() -> None:
    """20 trials' worth: 3 probes (15%). The line's first unit, then each probed unit twice (the line's own trial
    and a probe from the same head over the same part of the schedule), then the rest in one trial."""
    plan = plan_for(MESSY, ["sft"], 20, one_trial_per_unit=False)
    assert plan.stages[0].units == 17
    assert [(s.start, s.end, s.probe is not None) for s in plan.steps] == [
        (0, 1, False), (1, 2, False), (1, 2, True), (2, 3, False), (2, 3, True), (3, 4, False), (3, 4, True),
        (4, 17, False),
    ]  # fmt: skip
    assert [s.rate for s in plan.steps if s.probe] == [2.0, 0.5, 1.0]
    assert [s.drop for s in plan.steps if s.probe] == [None, None, "answer_format"]

    proposer = LineProposer()
    proposer.plan = lambda context: plan  # type: ignore[method-assign]
    trials: list[TrialRecord] = []

    def step(valid: float) -> Proposal:
        proposal = proposer.propose(_context(trials, units=20))
        trials.append(_record(len(trials) + 1, proposal, valid))
        trials[-1].train_metrics["steps"] = 40.0 + len(trials)
        return proposal

    first = step(0.20)
    assert (
        first.hyperparameters["schedule_to"] == pytest.approx(1 / 17)
        and first.hyperparameters["max_seconds"] == 16
    )
    line = step(0.30)
    assert line.init_from == "t01" and line.hyperparameters["resume_optimizer"] is True
    assert (line.hyperparameters["schedule_from"], line.hyperparameters["schedule_to"]) == pytest.approx(
        (1 / 17, 2 / 17)
    )
    probe = step(0.40)  # 2x the rate wins
    assert probe.init_from == "t01" and probe.operator == "ablate"
    assert probe.hyperparameters["learning_rate"] == pytest.approx(2e-3)
    assert probe.hyperparameters["schedule_from"] == line.hyperparameters["schedule_from"]
    assert probe.hyperparameters["max_steps"] == 42  # the steps the line's own trial (t02) took: equal steps
    after = step(0.45)
    assert after.init_from == "t03" and after.hyperparameters["learning_rate"] == pytest.approx(2e-3)
    slower = step(0.30)  # 0.5x of the new rate loses
    assert slower.init_from == "t03" and slower.hyperparameters["learning_rate"] == pytest.approx(1e-3)
    kept = step(0.50)
    assert kept.init_from == "t04"
    ablation = step(0.40)  # the line without answer_format: loses
    assert "answer_format" not in ablation.hyperparameters and ablation.hyperparameters["filter_by_verifier"]
    end = step(0.70)
    hp = end.hyperparameters
    assert end.init_from == "t06" and hp["answer_format"] == "final_number"  # the line's moves carry on
    assert hp["schedule_to"] == 1.0 and hp["max_seconds"] == pytest.approx(
        320.0 - sum(t.wall_s for t in trials[:-1])
    )
    with pytest.raises(SearchDone):
        proposer.propose(_context(trials, units=20))


def test_a_fixed_trial_count_cuts_the_line_into_continued_trials() -> None:
    """`--loop-n 4` without trial seconds: four trials, each continuing the one before over its quarter of one
    schedule (one warm-up, one decay), so the four train as one run of their length would."""
    proposer = LineProposer()
    trials: list[TrialRecord] = []
    spans = []
    for index in range(1, 5):
        proposal = proposer.propose(_context(trials, units=4, per_trial=True))
        hp = proposal.hyperparameters
        spans.append((hp["schedule_from"], hp["schedule_to"]))
        assert proposal.init_from == (f"t{index - 1:02d}" if index > 1 else None)
        assert hp.get("resume_optimizer", False) is (index > 1)
        trials.append(_record(index, proposal, 0.1 * index))
    assert spans == [(0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]


def test_a_failed_trial_is_retried_once_then_passed_over() -> None:
    proposer = LineProposer()
    trials: list[TrialRecord] = []
    first = proposer.propose(_context(trials, units=3, per_trial=True))
    trials.append(_record(1, first, None, status="failed"))
    retry = proposer.propose(_context(trials, units=3, per_trial=True))
    assert retry.operator == "debug" and retry.hyperparameters["learning_rate"] == pytest.approx(5e-4)
    assert retry.hyperparameters["schedule_to"] == pytest.approx(1 / 3)  # the same part of the line
    assert "at learning rate 0.0005" in retry.hypothesis  # what it says is what it runs
    trials.append(_record(2, retry, None, status="failed"))
    passed = proposer.propose(_context(trials, units=3, per_trial=True))
    assert passed.init_from is None and passed.hyperparameters["schedule_from"] == pytest.approx(1 / 3)


def test_a_step_that_needs_a_running_trial_waits() -> None:
    proposer = LineProposer()
    first = proposer.propose(_context([], units=4, per_trial=True))
    with pytest.raises(WaitForTrials, match="t01 is still running"):
        proposer.propose(_context([_record(1, first, None, status="pending")], units=4, per_trial=True))


def test_the_llm_researcher_is_shown_the_same_report_and_route(tmp_path: Path) -> None:
    from agent.proposers.prompts import proposal_prompt
    from agent.proposers.recipes import RecipeCatalog

    workspace = train_workspace(tmp_path, "arith-messy")
    prompt = proposal_prompt(_context([], workspace=workspace, benchmark="arith-messy"), RecipeCatalog({}))
    section = prompt.split("# What the train rows call for")[1].split("# Trainer library")[0]
    assert "wrong by the task's verifier" in section and "filter_by_verifier=true" in section
    assert 'answer_format="final_number"' in section and "Moves compose" in section
    assert "route on this budget: sft with answer_format=final_number, filter_by_verifier=True" in section
    assert "schedule_from and schedule_to" in section


def test_a_pretrained_models_rates_and_trial_length_carry_through_the_line() -> None:
    """The rates that fit the base model (trainers.model_fit, in the context) are the line's, and a run that leaves
    trial length to the proposer gets trials no longer than the fit allows."""
    context = _context([], units=4, per_trial=True).model_copy(
        update={"recipe_defaults": {"sft": {"learning_rate": 5e-5}}, "max_trial_seconds": 240.0}
    )
    first = LineProposer().propose(context)
    assert first.hyperparameters["learning_rate"] == 5e-5 and first.hyperparameters["max_seconds"] == 240.0
    second = LineProposer().propose(
        context.model_copy(update={"trials": [_record(1, first, 0.3)], "trials_left": 3})
    )
    assert second.hyperparameters["learning_rate"] == 5e-5 and second.init_from == "t01"
