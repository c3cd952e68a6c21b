"""The Optuna policies: their study lives in the run's folder and resumes with it, every recorded trial is told,
a trial asked before an interruption is asked for again with the same numbers; the LLM's view of the optimizer."""

from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace
from typing import Any

import optuna
import pytest

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.proposers.numeric import STORAGE_FILE, STUDY, NumericProposer, advice


def _context(trials: list[TrialRecord]) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=0.05,
        best_score=None,
        best_trial_id=None,
        trials=trials,
        trials_left=12 - len(trials),
        seconds_left=3600.0,
        recipes=["sft", "grpo"],
        trial_seconds=15.0,
        seed=3,
    )


def _run(run_dir: Path) -> Any:
    return SimpleNamespace(paths=SimpleNamespace(run_dir=run_dir), config=SimpleNamespace(memory=False))


def _record(index: int, proposal: Proposal, valid: float | None) -> TrialRecord:
    return TrialRecord(
        trial_id=f"t{index:02d}",
        index=index,
        proposal=proposal,
        status="succeeded" if valid is not None else "failed",
        valid_score=valid,
        checkpoint=f"trials/t{index:02d}/output" if valid is not None else None,
    )


@pytest.mark.parametrize("kind", ["tpe", "cmaes"])
def test_the_study_is_told_every_trial_and_resumes_from_the_run_folder(tmp_path: Path, kind: str) -> None:
    trials: list[TrialRecord] = []
    for index in range(1, 7):
        proposer = NumericProposer(kind)  # a new process each time: everything comes from the run's folder
        proposer.attach_run(_run(tmp_path), f"t{index:02d}")
        proposal = proposer.propose(_context(trials))
        hp = proposal.hyperparameters
        assert proposal.recipe in ("sft", "grpo") and hp["max_seconds"] == 15.0 and hp["max_steps"] is None
        assert hp["lr_scheduler_type"] in ("linear", "cosine", "constant") and 0 <= hp["warmup_ratio"] <= 0.2
        assert proposal.init_from is None or proposal.init_from in {t.trial_id for t in trials}
        score = None if index == 3 else 0.1 + 0.05 * index  # t03 fails
        trials.append(_record(index, proposal, score))
    drawn = {(t.proposal.recipe, t.proposal.hyperparameters["learning_rate"]) for t in trials}
    assert len(drawn) >= 4  # a sampler made afresh each time still draws something new each time
    proposer = NumericProposer(kind)
    proposer.attach_run(_run(tmp_path), "t07")
    again = proposer.propose(_context(trials))
    interrupted = NumericProposer(kind)  # the run died after asking for t07: the same numbers for t07
    interrupted.attach_run(_run(tmp_path), "t07")
    assert interrupted.propose(_context(trials)).hyperparameters == again.hyperparameters
    study = optuna.load_study(study_name=STUDY, storage=f"sqlite:///{tmp_path / STORAGE_FILE}")
    states = [t.state.name for t in study.trials]
    assert states == ["COMPLETE", "COMPLETE", "FAIL", "COMPLETE", "COMPLETE", "COMPLETE", "RUNNING"]
    assert [t.value for t in study.trials if t.value is not None] == pytest.approx(
        [0.15, 0.2, 0.3, 0.35, 0.4]
    )


def test_the_llm_sees_the_best_numbers_and_what_tpe_would_try_next() -> None:
    trials = [
        _record(1, Proposal(hypothesis="h", recipe="sft", hyperparameters={"learning_rate": 1e-3}), 0.2),
        _record(
            2,
            Proposal(
                hypothesis="h",
                recipe="sft",
                hyperparameters={"learning_rate": 2e-3, "lr_scheduler_type": "cosine"},
                init_from="t01",
            ),
            0.4,
        ),
        _record(3, Proposal(hypothesis="h", recipe="sft", hyperparameters={}, train_py="print()"), 0.9),
    ]
    text = advice(_context(trials))
    assert text is not None and "the 2 scored trials in its space" in text  # custom code is outside it
    assert "best so far: valid 0.400 with recipe sft from best, learning_rate=0.002" in text
    assert "it would try next: {'learning_rate'" in text
    assert advice(_context([])) is None


def test_the_tree_picks_the_move_and_optuna_its_numbers(tmp_path: Path) -> None:
    from agent.proposers.numeric import NumericHalf
    from agent.proposers.tree import TreeProposer

    tree = TreeProposer(numeric=NumericHalf("tpe"), name="tree-optuna")
    tree.attach_run(_run(tmp_path), "t01")
    first = tree.propose(_context([]))
    assert first.operator == "draft" and first.recipe == "sft" and first.init_from is None
    assert first.hyperparameters["lr_scheduler_type"] in ("linear", "cosine", "constant")
    assert "Numbers from Optuna" in first.rationale
    study = optuna.load_study(study_name="numbers-sft", storage=f"sqlite:///{tmp_path / STORAGE_FILE}")
    assert [t.user_attrs["rlloop_trial"] for t in study.trials] == ["t01"]
    trials = [_record(1, first, 0.3)]
    second = tree.propose(_context(trials))  # from t01 (it beat the base): the tree's own step, not Optuna's
    assert second.init_from == "t01" and "Numbers from Optuna" not in second.rationale
