"""Traces: each graph node of the loop is an MLflow trace linked to its trial's run (the parent run for prepare and
finish), and every LLM and tool call inside it is a span (`child_span`), so a reviewer sees why a proposal came out
as it did."""

from __future__ import annotations

import contextlib
import functools
import sys
from collections.abc import Callable, Iterator, Sequence
from typing import Any, Protocol, TypeVar

from agent.core import TrialRecord
from agent.tracking.tracker import Tracker

TRIAL_NODES = ("propose", "approve", "run_trial", "validate", "submit", "record")
RUN_NODES = ("prepare", "finish")


@contextlib.contextmanager
def child_span(name: str, span_type: str, inputs: dict[str, Any]) -> Iterator[Any]:
    """A span under the active trace (a node's), e.g. one LLM or tool call; None (and nothing recorded) when no
    trace is active, so callers outside a traced node pay nothing."""
    if "mlflow" not in sys.modules:
        yield None
        return
    import mlflow

    if mlflow.get_current_active_span() is None:
        yield None
        return
    with mlflow.start_span(name, span_type=span_type) as span:
        span.set_inputs(inputs)
        yield span


Nodes = TypeVar("Nodes", bound=type)


class NodeState(Protocol):
    """What a traced node's trace reads of the loop's state (`agent.loop.graph.LoopState`)."""

    @property
    def trials(self) -> Sequence[TrialRecord]: ...

    @property
    def current(self) -> TrialRecord | None: ...

    @property
    def mlflow_parent(self) -> str | None: ...


def _node_trial(node: str, state: NodeState) -> str | None:
    if node == "propose":  # the trial about to be proposed (the loop names them t01, t02, ...)
        return f"t{len(state.trials) + 1:02d}"
    if node in TRIAL_NODES and state.current is not None:
        return state.current.trial_id
    return None


def _traced(node: str, method: Callable[..., dict[str, Any]]) -> Callable[..., dict[str, Any]]:
    @functools.wraps(method)
    def run_node(self: Any, state: NodeState) -> dict[str, Any]:
        tracker: Tracker = self.tracker
        trial_id = _node_trial(node, state)
        inputs = {"trial_id": trial_id, "trials_done": len(state.trials)}
        link_to: str | None = None
        with tracker.node_trace(
            node, run_id=self.paths.run_id, benchmark=self.config.benchmark, trial_id=trial_id, inputs=inputs
        ) as span:
            update = method(self, state)
            parent = update.get("mlflow_parent") or state.mlflow_parent
            if span is not None:
                current: TrialRecord | None = update.get("current")
                span.set_outputs(
                    {k: update[k] for k in ("halt", "status", "stop_reason") if update.get(k)}
                    | ({"trial_status": current.status, "error": current.error} if current else {})
                )
                if parent and trial_id and (current or state.current):  # a trial exists
                    link_to = tracker.trial_run(parent, self.paths.run_id, self.config.benchmark, trial_id)
                elif parent:
                    link_to = parent
        if span is not None and link_to:
            tracker.link(span.trace_id, link_to)
        return update

    return run_node


def traced_nodes(cls: Nodes) -> Nodes:
    """Class decorator for the loop's node class: each node runs inside its own MLflow trace."""
    for node in (*RUN_NODES, *TRIAL_NODES):
        if hasattr(cls, node):
            setattr(cls, node, _traced(node, getattr(cls, node)))
    return cls
