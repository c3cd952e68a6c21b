"""The research loop as a LangGraph StateGraph, checkpointed to SQLite after every node so a run can resume.

    prepare -> propose -> [approve] -> run_trial -> validate -> [submit] -> record -> (propose | finish)

validate scores the checkpoint on the public valid split; the submission policy (`agent.loop.submission`) decides there
whether it goes to the grader or straight to record.

State holds the run's records as typed objects (`LoopState`: each trial a `TrialRecord`, the baselines
`BaselineScore`s); the SQLite checkpointer stores them and revives them as objects (`agent.status.open_checkpoints`,
whose allowlist names their classes). Nodes read the state's attributes and return the fields they change, as
objects; they never change an object of the state in place (the checkpointer may still be writing it: they copy a
record first). Live resources (grader process, sandbox, MLflow client) belong to the `LoopNodes` object that
implements the nodes, so they are rebuilt, not deserialised, when a run resumes.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

from langgraph.graph import END, START, StateGraph
from pydantic import BaseModel, Field

from agent.core import BaselineScore, TrialRecord


class LoopState(BaseModel):
    """The loop's state, checkpointed after every node; a field a node never wrote holds its default."""

    run_id: str = ""
    baseline_score: float | None = None
    baseline: BaselineScore | None = None  # the grader's baseline on the (public half of the) hidden test set
    best_score: float | None = None
    best_trial_id: str | None = None
    trials: list[TrialRecord] = Field(default_factory=list)  # in order
    current: TrialRecord | None = None  # the trial in flight
    submissions: int = 0
    scores: list[float] = Field(default_factory=list)  # public score of each counted submission, in order
    used_s: float = 0.0  # wall seconds of budget spent, summed across resumes
    mlflow_parent: str | None = None
    feedback: str | None = None  # a reviewer's rejection reason, for the next proposal
    stop_reason: str | None = None
    status: str | None = None  # running | finished | failed | interrupted | terminated (None: not started)
    final: dict[str, Any] = Field(default_factory=dict)  # the run's summary.json, once it ended
    timings: dict[str, float] = Field(default_factory=dict)
    halt: str | None = None  # why the loop must stop early (e.g. the proposer's endpoint is gone)
    baseline_valid: BaselineScore | None = None  # the base model on the valid split (agent.loop.validation)
    submit_now: bool = False  # the submission policy's decision for the trial in flight (set by validate)
    search_done: str | None = None  # the proposer found nothing left worth trying: why the run ends, finished
    # the rest of a concurrent step's trials, in id order (agent.loop.concurrency)
    queue: list[TrialRecord] = Field(default_factory=list)


class LoopNodes(Protocol):
    def prepare(self, state: LoopState) -> dict[str, Any]: ...
    def propose(self, state: LoopState) -> dict[str, Any]: ...
    def approve(self, state: LoopState) -> dict[str, Any]: ...
    def run_trial(self, state: LoopState) -> dict[str, Any]: ...
    def validate(self, state: LoopState) -> dict[str, Any]: ...
    def submit(self, state: LoopState) -> dict[str, Any]: ...
    def record(self, state: LoopState) -> dict[str, Any]: ...
    def finish(self, state: LoopState) -> dict[str, Any]: ...
    def stop_reason(self, state: LoopState) -> str | None: ...
    def needs_approval(self, state: LoopState) -> bool: ...


def build_graph(nodes: LoopNodes) -> StateGraph:
    graph = StateGraph(LoopState)
    for name in ("prepare", "propose", "approve", "run_trial", "validate", "submit", "record", "finish"):
        graph.add_node(name, getattr(nodes, name))

    def after_prepare_or_record(state: LoopState) -> Literal["propose", "finish"]:
        return "finish" if nodes.stop_reason(state) else "propose"

    def after_propose(state: LoopState) -> Literal["approve", "run_trial", "record", "finish"]:
        if state.halt or state.search_done:
            return "finish"
        if _status(state) == "failed":  # the proposer itself failed: record it and move on
            return "record"
        return "approve" if nodes.needs_approval(state) else "run_trial"

    def after_approve(state: LoopState) -> Literal["run_trial", "record"]:
        # a rejected proposal is recorded (then the loop goes on or finishes); an approved one runs
        return "record" if _status(state) == "rejected" else "run_trial"

    def after_trial(state: LoopState) -> Literal["validate", "record"]:
        return "validate" if _status(state) == "succeeded" else "record"

    def after_validate(state: LoopState) -> Literal["submit", "record"]:
        return "submit" if _status(state) == "succeeded" and state.submit_now else "record"

    graph.add_edge(START, "prepare")
    graph.add_conditional_edges("prepare", after_prepare_or_record)
    graph.add_conditional_edges("propose", after_propose)
    graph.add_conditional_edges("approve", after_approve)
    graph.add_conditional_edges("run_trial", after_trial)
    graph.add_conditional_edges("validate", after_validate)
    graph.add_edge("submit", "record")
    graph.add_conditional_edges("record", after_prepare_or_record)
    graph.add_edge("finish", END)
    return graph


def _status(state: LoopState) -> str | None:
    return state.current.status if state.current is not None else None
