"""The research loop as a LangGraph StateGraph, checkpointed to SQLite after every node so a run can resume.

    prepare -> propose -> [approve] -> run_trial -> validate -> [submit] -> record -> (propose | finish)

validate scores the checkpoint on the public valid split; the submission policy (`agent.loop.submission`) decides there
whether it goes to the grader or straight to record.

State holds only plain JSON-able data; live resources (grader process, sandbox, MLflow client) belong to the
`LoopNodes` object that implements the nodes, so they are rebuilt, not deserialised, when a run resumes.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol, TypedDict

from langgraph.graph import END, START, StateGraph


class LoopState(TypedDict, total=False):
    run_id: str
    baseline_score: float | None
    baseline: dict[str, Any]
    best_score: float | None
    best_trial_id: str | None
    trials: list[dict[str, Any]]  # TrialRecord dumps, in order
    current: dict[str, Any] | None  # the trial in flight
    submissions: int
    scores: list[float]  # public score of each counted submission, in order
    used_s: float  # wall seconds of budget spent, summed across resumes
    mlflow_parent: str | None
    feedback: str | None  # a reviewer's rejection reason, for the next proposal
    stop_reason: str | None
    status: str  # running | finished | failed | interrupted | terminated
    final: dict[str, Any]
    timings: dict[str, float]
    halt: str | None  # why the loop must stop early (e.g. the proposer's endpoint is gone)
    baseline_valid: dict[str, Any] | None  # the base model's valid score, n and CI (agent.loop.validation)
    submit_now: bool  # the submission policy's decision for the trial in flight (set by validate)
    search_done: str | None  # the proposer found nothing left worth trying: why the run ends early, finished
    queue: list[
        dict[str, Any]
    ]  # the rest of a concurrent step's trials, in id order (agent.loop.concurrency)


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
        if state.get("halt") or state.get("search_done"):
            return "finish"
        current = state.get("current") or {}
        if current.get("status") == "failed":  # the proposer itself failed: record it and move on
            return "record"
        return "approve" if nodes.needs_approval(state) else "run_trial"

    def after_approve(state: LoopState) -> Literal["run_trial", "record"]:
        current = state.get("current") or {}
        # a rejected proposal is recorded (then the loop goes on or finishes); an approved one runs
        return "record" if current.get("status") == "rejected" else "run_trial"

    def after_trial(state: LoopState) -> Literal["validate", "record"]:
        current = state.get("current") or {}
        return "validate" if current.get("status") == "succeeded" else "record"

    def after_validate(state: LoopState) -> Literal["submit", "record"]:
        current = state.get("current") or {}
        return "submit" if current.get("status") == "succeeded" and state.get("submit_now") else "record"

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
