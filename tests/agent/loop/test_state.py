"""The loop's state is typed (`agent.loop.graph.LoopState`): its records are objects in the nodes, in the SQLite
checkpoint and after a resume, and plain JSON for the pages that read a run from outside (`agent.status.read_state`)."""

from __future__ import annotations

import logging
import typing
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel

from agent.core import BaselineScore, Proposal, TrialRecord
from agent.loop.graph import LoopState, build_graph
from agent.status import open_checkpoints, read_state
from agent.status.runs import CHECKPOINT_RECORDS


class _Nodes:
    """`LoopNodes` in miniature: two trials, each trained and recorded; `die_at` crashes that trial's training."""

    def __init__(self, die_at: str | None = None) -> None:
        self.die_at = die_at
        self.seen: list[LoopState] = []

    def prepare(self, state: LoopState) -> dict[str, Any]:
        baseline = BaselineScore(score=0.1, n=120, ci_low=0.05, ci_high=0.15)
        return {"status": "running", "baseline": baseline, "baseline_valid": baseline, "baseline_score": 0.1}

    def propose(self, state: LoopState) -> dict[str, Any]:
        index = len(state.trials) + 1
        proposal = Proposal(hypothesis="more steps", recipe="sft", hyperparameters={"max_steps": 5})
        return {"current": TrialRecord(trial_id=f"t{index:02d}", index=index, proposal=proposal)}

    def approve(self, state: LoopState) -> dict[str, Any]:
        return {}

    def run_trial(self, state: LoopState) -> dict[str, Any]:
        self.seen.append(state)
        assert state.current is not None
        if state.current.trial_id == self.die_at:
            raise RuntimeError("killed mid-trial")
        return {"current": state.current.model_copy(update={"status": "succeeded", "checkpoint": "out"})}

    def validate(self, state: LoopState) -> dict[str, Any]:
        return {"submit_now": False}

    def submit(self, state: LoopState) -> dict[str, Any]:
        return {}

    def record(self, state: LoopState) -> dict[str, Any]:
        return {"trials": [*state.trials, state.current], "current": None}

    def finish(self, state: LoopState) -> dict[str, Any]:
        return {"status": "finished"}

    def stop_reason(self, state: LoopState) -> str | None:
        return "ran all 2 trials" if len(state.trials) >= 2 else None

    def needs_approval(self, state: LoopState) -> bool:
        return False


def checkpointed(run_dir: Path) -> dict[str, Any]:
    """The run's last checkpointed state, as the loop's checkpointer revives it."""
    saver = open_checkpoints(run_dir / "checkpoints.db", read_only=True)
    try:
        found = saver.get_tuple({"configurable": {"thread_id": run_dir.name}})
    finally:
        saver.conn.close()
    assert found is not None
    return dict(found.checkpoint["channel_values"])


def _run(run_dir: Path, nodes: _Nodes, payload: Any) -> None:
    graph = build_graph(nodes).compile(checkpointer=open_checkpoints(run_dir / "checkpoints.db"))
    graph.invoke(payload, {"configurable": {"thread_id": run_dir.name}})


def test_a_resumed_run_gets_its_records_back_as_objects(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    run_dir = tmp_path / "run-1"
    run_dir.mkdir()
    with pytest.raises(RuntimeError, match="killed mid-trial"):
        _run(run_dir, _Nodes(die_at="t02"), {"run_id": run_dir.name})

    resumed = _Nodes()  # a fresh process: new nodes, a new checkpointer on the same file
    with caplog.at_level(logging.WARNING):
        _run(run_dir, resumed, None)  # on from the last checkpoint: t02 trains again
    (state,) = resumed.seen
    assert isinstance(state, LoopState)
    assert [type(t) for t in state.trials] == [TrialRecord]
    assert isinstance(state.current, TrialRecord) and state.current.trial_id == "t02"
    assert isinstance(state.baseline, BaselineScore) and state.baseline.ci == (0.05, 0.15)
    assert not [r for r in caplog.records if r.name.startswith("langgraph")], caplog.text  # no unlisted class

    values = checkpointed(run_dir)
    assert values["status"] == "finished"
    assert [(type(t), t.trial_id, t.status) for t in values["trials"]] == [
        (TrialRecord, "t01", "succeeded"),
        (TrialRecord, "t02", "succeeded"),
    ]

    plain = read_state(run_dir)  # the pages' view: JSON data, records as their dumps
    assert [t["trial_id"] for t in plain["trials"]] == ["t01", "t02"]
    assert plain["trials"][0]["proposal"]["hyperparameters"] == {"max_steps": 5}
    assert plain["trials"][0]["wall_s"] == 0.0 and plain["baseline"]["n"] == 120


def _models(annotation: Any) -> set[type[BaseModel]]:
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return {annotation}
    return set().union(*(_models(arg) for arg in typing.get_args(annotation)))


def test_the_checkpoint_revives_every_record_class_of_the_state() -> None:
    """A class of LoopState's fields missing from the checkpointer's allowlist would come back as a dict after a
    resume (and LangGraph warns of every class it revives unlisted)."""
    held = set().union(*(_models(field.annotation) for field in LoopState.model_fields.values()))
    assert held == set(CHECKPOINT_RECORDS)
