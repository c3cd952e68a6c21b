"""The built-in policies look at the train rows first: wrong answers call for the verifier's filter, sentences for the
final number, prompts without answers for a prompt-only recipe; clean data call for nothing."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.records import ProposalContext
from agent.proposers.builtin import BuiltinProposer
from agent.proposers.data_moves import data_report
from agent.proposers.halving import HalvingProposer
from agent.proposers.tree import TreeProposer
from tests.agent.proposers.workspaces import train_workspace


def _context(workspace: Path, benchmark: str) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark=benchmark,
        benchmark_description="d",
        base_model="tiny-arith",
        baseline_score=0.05,
        best_score=None,
        best_trial_id=None,
        trials=[],
        trials_left=5,
        seconds_left=600.0,
        recipes=["sft", "rft", "grpo"],
        trial_seconds=16.0,
        compute_left_s=80.0,
        workspace=str(workspace),
    )


@pytest.mark.parametrize(
    ("benchmark", "fields", "prompts_only"),
    [
        ("arith", [], False),
        ("arith-noisy", [{"filter_by_verifier": True}], False),
        ("arith-verbose", [{"answer_format": "final_number"}], False),
        ("arith-few", [], True),
        ("arith-messy", [{"answer_format": "final_number"}, {"filter_by_verifier": True}], False),
    ],
)
def test_the_data_call_for_their_moves(
    tmp_path: Path, benchmark: str, fields: list[dict[str, object]], prompts_only: bool
) -> None:
    report = data_report(str(train_workspace(tmp_path, benchmark)), benchmark)
    assert [m.fields for m in report.moves] == fields and report.prompts_only == prompts_only


def test_every_built_in_policy_starts_where_the_data_point(tmp_path: Path) -> None:
    noisy = _context(train_workspace(tmp_path, "arith-noisy"), "arith-noisy")
    for proposer in (TreeProposer(), HalvingProposer(), BuiltinProposer()):
        first = proposer.propose(noisy)
        assert first.recipe == "sft" and first.hyperparameters.get("filter_by_verifier") is True, proposer
    few = _context(train_workspace(tmp_path, "arith-few"), "arith-few")
    assert TreeProposer().propose(few).recipe == "rft" and BuiltinProposer().propose(few).recipe == "rft"
    clean = _context(train_workspace(tmp_path, "arith"), "arith")
    first = TreeProposer().propose(clean)
    assert first.recipe == "sft" and "filter_by_verifier" not in first.hyperparameters
