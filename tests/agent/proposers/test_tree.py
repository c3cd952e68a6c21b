"""The search-tree policy on constructed trees of real TrialRecords: UCB on valid CIs, saturation, early stop."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.proposers.base import SearchDone
from agent.proposers.tree import TreeProposer, build_tree, moves, ucb


def _ctx(trials: list[TrialRecord], base: tuple[float, float, float] = (0.05, 0.03, 0.08)) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=base[0],
        baseline_valid_score=base[0],
        baseline_valid_ci=(base[1], base[2]),
        best_score=None,
        best_trial_id=None,
        trials=trials,
        trials_left=8,
        seconds_left=1200.0,
        recipes=["sft", "grpo"],
    )


def _trial(
    i: int,
    valid: tuple[float, float, float] | None,
    parent: str | None = None,
    lr: float = 1e-3,
    recipe: str = "sft",
    status: str = "succeeded",
) -> TrialRecord:
    score, low, high = valid if valid else (None, None, None)
    return TrialRecord(
        trial_id=f"t{i:02d}",
        index=i,
        proposal=Proposal(
            hypothesis="h", recipe=recipe, hyperparameters={"learning_rate": lr}, parent=parent
        ),
        status=status,  # type: ignore[arg-type]
        checkpoint=f"trials/t{i:02d}/output" if status == "succeeded" else None,
        valid_score=score,
        valid_ci_low=low,
        valid_ci_high=high,
        error=None if status == "succeeded" else "exited with code 1",
    )


def test_first_trial_drafts_sft_from_the_base_model() -> None:
    proposal = TreeProposer(max_steps=10).propose(_ctx([]))
    assert (proposal.recipe, proposal.parent, proposal.init_from, proposal.operator) == (
        "sft",
        None,
        None,
        "draft",
    )
    assert proposal.hyperparameters["max_steps"] == 10


def test_ucb_branches_from_a_runner_up_whose_ci_is_wide() -> None:
    best = _trial(1, (0.80, 0.78, 0.82))
    wide = _trial(2, (0.77, 0.60, 0.94), recipe="grpo", lr=1e-4)  # fewer samples, so a wide CI
    child_of_best = _trial(3, (0.80, 0.78, 0.82), parent="t01", lr=7e-4)
    context = _ctx([best, wide, child_of_best])
    proposal = TreeProposer().propose(context)
    assert proposal.parent == "t02", proposal.rationale
    assert "runner-up" in proposal.rationale
    # with the same CI width the best node wins: the choice is the CI, not an accident of order
    narrow = _trial(2, (0.77, 0.75, 0.79), recipe="grpo", lr=1e-4)
    assert TreeProposer().propose(_ctx([best, narrow, child_of_best])).parent in ("t01", "t03")


def test_a_line_that_still_climbs_continues_at_its_rate_then_anneals_when_it_stops() -> None:
    climbing = _trial(1, (0.6, 0.55, 0.65))  # beat the base (0.05) beyond noise
    proposal = TreeProposer().propose(_ctx([climbing]))
    assert (proposal.parent, proposal.operator) == ("t01", "improve")
    assert proposal.hyperparameters["learning_rate"] == pytest.approx(1e-3)
    assert "still climbs" in proposal.rationale
    # the continuation did not beat t01 beyond noise: t01's next move is the annealed rate
    flat = _trial(2, (0.57, 0.52, 0.62), parent="t01")
    proposal = TreeProposer().propose(_ctx([climbing, flat]))
    assert proposal.parent == "t01"
    assert proposal.hyperparameters["learning_rate"] == pytest.approx(7e-4)
    # a node that did not beat its own parent is not continued: its first move is the anneal
    nodes = {n.id: n for n in build_tree(_ctx([climbing, flat]))}
    assert moves(nodes["t02"], ["sft", "grpo"])[0].lr == pytest.approx(7e-4)


def test_stops_early_at_the_ceiling() -> None:
    trials = [_trial(1, (0.9, 0.86, 0.94)), _trial(2, (1.0, 1.0, 1.0), parent="t01", lr=7e-4)]
    with pytest.raises(SearchDone, match="ceiling.*t02 1.000"):
        TreeProposer().propose(_ctx(trials))


def test_a_branch_without_gain_beyond_noise_in_k_children_is_closed() -> None:
    root_child = _trial(1, (0.50, 0.45, 0.55))
    flat = [_trial(i, (0.52, 0.47, 0.57), parent="t01", lr=lr) for i, lr in ((2, 7e-4), (3, 2e-3), (4, 3e-4))]
    nodes = {n.id: n for n in build_tree(_ctx([root_child, *flat]))}
    assert len(nodes["t01"].children) == 3
    proposal = TreeProposer(k=3).propose(_ctx([root_child, *flat]))
    assert proposal.parent != "t01"
    assert "t01: 3 children, none beat 0.500 beyond noise" in proposal.rationale


def test_run_ends_when_every_branch_is_done() -> None:
    # one recipe, and every node has k=1 child that did not beat it: nothing is left to try
    t1 = _trial(1, (0.04, 0.02, 0.06))
    t2 = _trial(2, (0.04, 0.02, 0.06), parent="t01", lr=7e-4)
    t3 = _trial(3, (0.03, 0.01, 0.05), parent="t02", lr=4.9e-4)
    context = _ctx([t1, t2, t3]).model_copy(update={"recipes": ["sft"]})
    with pytest.raises(SearchDone, match="every branch is done"):
        TreeProposer(k=1).propose(context)


def test_a_failed_trial_is_debugged_once_from_the_same_parent() -> None:
    ok = _trial(1, (0.6, 0.55, 0.65))
    failed = _trial(2, None, parent="t01", lr=7e-4, status="failed")
    proposal = TreeProposer().propose(_ctx([ok, failed]))
    assert (proposal.operator, proposal.parent) == ("debug", "t01")
    assert proposal.hyperparameters["learning_rate"] == pytest.approx(3.5e-4)
    debugged = _trial(3, None, parent="t01", lr=3.5e-4, status="failed")
    debugged.proposal.operator = "debug"
    assert TreeProposer().propose(_ctx([ok, failed, debugged])).operator != "debug"


def test_a_debugged_trial_keeps_its_train_row_choices() -> None:
    """A filtered or reformatted draft that ran out of time is the same move again, not plain SFT."""
    failed = _trial(1, None, lr=1e-3, status="failed")
    failed.proposal.hyperparameters.update({"answer_format": "final_number", "filter_by_verifier": True})
    proposal = TreeProposer().propose(_ctx([failed]))
    assert proposal.operator == "debug"
    assert proposal.hyperparameters["answer_format"] == "final_number"
    assert proposal.hyperparameters["filter_by_verifier"] is True


def test_ucb_bonus_shrinks_with_children() -> None:
    nodes = {
        n.id: n for n in build_tree(_ctx([_trial(1, (0.5, 0.4, 0.6)), _trial(2, (0.5, 0.4, 0.6), "t01")]))
    }
    assert ucb(nodes["t02"], 2) > ucb(nodes["t01"], 2)


def test_parent_and_init_from_are_one_fact() -> None:
    assert Proposal(hypothesis="h", recipe="sft", init_from="t01").parent == "t01"
    assert Proposal(hypothesis="h", recipe="sft", parent="t01").init_from == "t01"
    with pytest.raises(ValueError, match="differ"):
        Proposal(hypothesis="h", recipe="sft", parent="t01", init_from="t02")


def test_when_a_drafts_branch_closes_the_base_is_drafted_again_at_another_rate() -> None:
    flat = _trial(1, (0.05, 0.03, 0.08))  # no better than the base model
    kids = [_trial(i, (0.05, 0.03, 0.08), parent="t01", lr=lr) for i, lr in ((2, 7e-4), (3, 2e-3), (4, 3e-4))]
    context = _ctx([flat, *kids]).model_copy(update={"recipes": ["sft"]})
    proposal = TreeProposer().propose(context)
    assert (proposal.parent, proposal.operator, proposal.recipe) == (None, "draft", "sft")
    assert proposal.hyperparameters["learning_rate"] == pytest.approx(2e-3)
    assert "t01: 3 children, none beat 0.050 beyond noise" in proposal.rationale


def test_with_memory_the_first_draft_is_the_best_remembered_first_move(tmp_path: Path) -> None:
    """--memory: an earlier run's lessons, written by agent.proposers.memory, seed the tree's first draft; later proposals
    and runs without --memory are the policy's own."""
    from types import SimpleNamespace

    from agent.proposers.memory import remember_run

    earlier = [
        _trial(1, (0.30, 0.25, 0.35), lr=3e-5, recipe="grpo"),
        _trial(2, (0.10, 0.05, 0.15), lr=2e-3, recipe="sft"),
    ]
    remember_run(tmp_path, "arith", "tiny-arith", "earlier-run", earlier, baseline=0.05)
    config = SimpleNamespace(memory=True, home=tmp_path, benchmark="arith", base_model="tiny-arith")
    policy = TreeProposer(max_steps=10)
    policy.attach_run(SimpleNamespace(config=config), "t01")
    first = policy.propose(_ctx([]))
    assert (first.recipe, first.parent, first.operator) == ("grpo", None, "draft")
    assert first.hyperparameters["learning_rate"] == 3e-5 and first.hyperparameters["max_steps"] == 10
    assert "earlier run" in first.hypothesis
    forgetful = TreeProposer(max_steps=10)
    forgetful.attach_run(SimpleNamespace(config=SimpleNamespace(**{**vars(config), "memory": False})), "t01")
    assert forgetful.propose(_ctx([])).recipe == "sft"


def test_with_memory_a_checkpoint_first_tries_the_rate_step_earlier_runs_gained_most_with(
    tmp_path: Path,
) -> None:
    """--memory: in an earlier run, keeping the rate gained on its parent and annealing lost; the next run keeps
    the rate first from a checkpoint, even one that did not beat its own parent (where the policy alone anneals)."""
    from types import SimpleNamespace

    from agent.proposers.memory import best_step, remember_run

    assert best_step(tmp_path, "arith", "tiny-arith") is None  # nothing remembered
    earlier = [
        _trial(1, (0.30, 0.25, 0.35), lr=1e-3),
        _trial(2, (0.45, 0.40, 0.50), parent="t01", lr=1e-3),  # kept the rate: +0.15
        _trial(3, (0.40, 0.35, 0.45), parent="t02", lr=7e-4),  # annealed: -0.05
        _trial(4, (0.50, 0.45, 0.55), parent="t02", lr=1e-3),  # kept it again: +0.05
        _trial(5, (0.20, 0.15, 0.25), parent="t01", lr=1e-4, recipe="grpo"),  # not a rate step
    ]
    remember_run(tmp_path, "arith", "tiny-arith", "earlier-run", earlier, baseline=0.05)
    assert best_step(tmp_path, "arith", "tiny-arith") == 1.0

    config = SimpleNamespace(memory=True, home=tmp_path, benchmark="arith", base_model="tiny-arith")
    policy = TreeProposer(max_steps=10)
    policy.attach_run(SimpleNamespace(config=config), "t02")
    first = _trial(1, (0.6, 0.55, 0.65))
    flat = _trial(2, (0.57, 0.52, 0.62), parent="t01")  # did not beat t01: the policy alone would anneal next
    nodes = {n.id: n for n in build_tree(_ctx([first, flat]))}
    assert moves(nodes["t02"], ["sft", "grpo"])[0].lr == pytest.approx(7e-4)
    remembered = moves(nodes["t02"], ["sft", "grpo"], policy.remembered_step)
    assert remembered[0].lr == pytest.approx(1e-3) and "earlier run" in remembered[0].why
    assert len({(m.recipe, m.lr) for m in remembered}) == len(remembered)  # no move offered twice
    level = [_trial(1, (0.07, 0.04, 0.10))]  # no gain on the base beyond noise: alone, the policy anneals it
    assert TreeProposer().propose(_ctx(level)).hyperparameters["learning_rate"] == pytest.approx(7e-4)
    proposal = policy.propose(_ctx(level))
    assert (proposal.parent, proposal.hyperparameters["learning_rate"]) == ("t01", pytest.approx(1e-3))
    assert "--memory" in proposal.rationale

    remember_run(  # a later run where annealing gained more outweighs it
        tmp_path,
        "arith",
        "tiny-arith",
        "later-run",
        [_trial(1, (0.3, 0.25, 0.35)), _trial(2, (0.8, 0.75, 0.85), parent="t01", lr=7e-4)],
        baseline=0.05,
    )
    assert best_step(tmp_path, "arith", "tiny-arith") == 0.7
