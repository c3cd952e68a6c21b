"""MLflow: a research run's parent run and its trials' runs (`tracker`), the traces of the loop's nodes
(`traces`), the review view and links a person opens (`review`, `links`), `rlloop ui` (`ui`, served through
`mlflow_app`), and the record of what a run's numbers depend on besides its config (`environment`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.tracking.environment import environment_record
    from agent.tracking.links import parent_run_url, review_links
    from agent.tracking.review import runs_url, scores_url
    from agent.tracking.traces import child_span, traced_nodes
    from agent.tracking.tracker import PARENT_TAG, Tracker, open_client
    from agent.tracking.ui import ui_command

__all__ = [
    "PARENT_TAG",
    "Tracker",
    "child_span",
    "environment_record",
    "open_client",
    "parent_run_url",
    "review_links",
    "runs_url",
    "scores_url",
    "traced_nodes",
    "ui_command",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "PARENT_TAG": "agent.tracking.tracker",
    "Tracker": "agent.tracking.tracker",
    "child_span": "agent.tracking.traces",
    "environment_record": "agent.tracking.environment",
    "open_client": "agent.tracking.tracker",
    "parent_run_url": "agent.tracking.links",
    "review_links": "agent.tracking.links",
    "runs_url": "agent.tracking.review",
    "scores_url": "agent.tracking.review",
    "traced_nodes": "agent.tracking.traces",
    "ui_command": "agent.tracking.ui",
}


__getattr__ = lazy_face(__name__, _FACE)
