"""Approval policy and the decision files the CLI, the service and the waiting run share."""

from __future__ import annotations

from pathlib import Path

import pytest

from agent.core.records import Proposal, TrialRecord
from agent.loop.approvals import (
    Decision,
    clear_pending,
    list_pending,
    policy_requires,
    publish_pending,
    read_decision,
    write_decision,
)


def _proposal(code: bool = False, seconds: float = 60) -> Proposal:
    return Proposal(
        hypothesis="h",
        recipe="sft",
        hyperparameters={"learning_rate": 1e-3, "max_seconds": seconds},
        train_py="print('hi')" if code else None,
    )


def test_policies_combine() -> None:
    assert not policy_requires("never", _proposal(code=True), 10)
    assert policy_requires("always", _proposal(), 10)
    assert policy_requires("code", _proposal(code=True), 10)
    assert not policy_requires("code", _proposal(), 10)
    assert policy_requires("code,budget", _proposal(seconds=900), 600)
    assert not policy_requires("budget", _proposal(seconds=60), 600)


def test_decision_round_trip(tmp_path: Path) -> None:
    run_dir = tmp_path / "runs" / "run-1"
    record = TrialRecord(trial_id="t01", index=1, proposal=_proposal())
    with pytest.raises(LookupError, match="nothing waits"):
        write_decision(run_dir, "t01", Decision(action="approve"))
    publish_pending(run_dir, record)
    assert [(r, t.trial_id) for r, t in list_pending(tmp_path / "runs")] == [("run-1", "t01")]
    write_decision(run_dir, "t01", Decision(action="edit", set={"learning_rate": 5e-4}, by="alice"))
    decision = read_decision(run_dir, "t01")
    assert decision is not None and decision.by == "alice"
    assert decision.apply(record.proposal).hyperparameters["learning_rate"] == 5e-4
    clear_pending(run_dir, "t01")
    assert list_pending(tmp_path / "runs") == []
    assert (run_dir / "approvals" / "t01.decided.json").exists()
