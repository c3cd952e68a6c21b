"""A run read from outside it (the CLI's `rlloop runs`, the service's pages, a sweep's report): its state from the
loop's checkpoint (`runs`: `read_state`, `open_checkpoints`), its row among a home's runs, and its headline in
words (`headline`)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.status.headline import Headline, checkpoint_text, run_headline
    from agent.status.runs import RunRow, collect_runs, open_checkpoints, read_state, run_row

__all__ = [
    "Headline",
    "RunRow",
    "checkpoint_text",
    "collect_runs",
    "open_checkpoints",
    "read_state",
    "run_headline",
    "run_row",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "Headline": "agent.status.headline",
    "RunRow": "agent.status.runs",
    "checkpoint_text": "agent.status.headline",
    "collect_runs": "agent.status.runs",
    "open_checkpoints": "agent.status.runs",
    "read_state": "agent.status.runs",
    "run_headline": "agent.status.headline",
    "run_row": "agent.status.runs",
}


__getattr__ = lazy_face(__name__, _FACE)
