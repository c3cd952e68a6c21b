"""The end of a run, the research loop's and an external agent's alike (`finish`): the grader's final numbers, the
results.csv row (`rows`), summary.json, the score plot (`plots`), the grader's flags in words (`flags`), the
MLflow parent closed, and the summary a person reads."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.results.finish import (
        FINISH_RESERVE_S,
        best_checkpoint,
        close_tracking,
        ended_early,
        error_line,
        interrupted_before_start,
        print_summary,
        read_final,
        submission_summary,
        write_ending,
    )
    from agent.results.flags import submission_flags
    from agent.results.plots import save_figure
    from agent.results.rows import final_figures, result_row, summary_figures

__all__ = [
    "FINISH_RESERVE_S",
    "best_checkpoint",
    "close_tracking",
    "ended_early",
    "error_line",
    "final_figures",
    "interrupted_before_start",
    "print_summary",
    "read_final",
    "result_row",
    "save_figure",
    "submission_flags",
    "submission_summary",
    "summary_figures",
    "write_ending",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "FINISH_RESERVE_S": "agent.results.finish",
    "best_checkpoint": "agent.results.finish",
    "close_tracking": "agent.results.finish",
    "ended_early": "agent.results.finish",
    "error_line": "agent.results.finish",
    "final_figures": "agent.results.rows",
    "interrupted_before_start": "agent.results.finish",
    "print_summary": "agent.results.finish",
    "read_final": "agent.results.finish",
    "result_row": "agent.results.rows",
    "save_figure": "agent.results.plots",
    "submission_flags": "agent.results.flags",
    "submission_summary": "agent.results.finish",
    "summary_figures": "agent.results.rows",
    "write_ending": "agent.results.finish",
}


__getattr__ = lazy_face(__name__, _FACE)
