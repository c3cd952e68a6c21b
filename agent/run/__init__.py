"""One run's life, shared by the research loop and external agents: config, start-up, workspace, base models,
the grader process, MLflow tracking, reporting, interrupts, child processes, leftovers, the end of a run, results."""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from agent.run.children import Child, run_child, signal_group, spawn_child
    from agent.run.config import RunConfig, load_config_file, parse_duration
    from agent.run.finish import (
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
    from agent.run.grading import GraderError, GraderProcess, free_port
    from agent.run.headline import Headline, checkpoint_text, run_headline
    from agent.run.interrupts import (
        RunInterrupted,
        failpoint,
        interrupts_as_exceptions,
        interrupts_in_main_thread,
    )
    from agent.run.leftovers import end_leftovers
    from agent.run.models import ModelNotFoundError, resolve_base_model
    from agent.run.plugins import PROPOSERS, ProposerFactory
    from agent.run.reporting import Reporter, save_figure, submission_flags
    from agent.run.results import final_figures, result_row, summary_figures
    from agent.run.startup import (
        StartedRun,
        locate_run,
        make_budget,
        open_sandbox,
        record_run,
        start_run,
        write_recipe_catalog,
    )
    from agent.run.status import RunRow, collect_runs, read_state, run_row
    from agent.run.tracking import (
        PARENT_TAG,
        Tracker,
        child_span,
        open_client,
        review_links,
        run_page_url,
        runs_url,
        scores_url,
        sqlite_path,
        traced_nodes,
        ui_command,
    )
    from agent.run.workspace import (
        HomeNotWritableError,
        RunPaths,
        atomic_write_json,
        atomic_write_text,
        ensure_home,
        new_run_id,
        prepare_workspace,
    )

__all__ = [
    "Child",
    "FINISH_RESERVE_S",
    "GraderError",
    "GraderProcess",
    "Headline",
    "HomeNotWritableError",
    "ModelNotFoundError",
    "PARENT_TAG",
    "PROPOSERS",
    "ProposerFactory",
    "Reporter",
    "RunConfig",
    "RunInterrupted",
    "RunPaths",
    "RunRow",
    "StartedRun",
    "Tracker",
    "atomic_write_json",
    "atomic_write_text",
    "best_checkpoint",
    "checkpoint_text",
    "child_span",
    "close_tracking",
    "collect_runs",
    "end_leftovers",
    "ended_early",
    "ensure_home",
    "error_line",
    "failpoint",
    "final_figures",
    "free_port",
    "interrupted_before_start",
    "interrupts_as_exceptions",
    "interrupts_in_main_thread",
    "load_config_file",
    "locate_run",
    "make_budget",
    "new_run_id",
    "open_client",
    "open_sandbox",
    "parse_duration",
    "prepare_workspace",
    "print_summary",
    "read_final",
    "read_state",
    "record_run",
    "resolve_base_model",
    "result_row",
    "review_links",
    "run_child",
    "run_headline",
    "run_page_url",
    "run_row",
    "runs_url",
    "save_figure",
    "scores_url",
    "signal_group",
    "spawn_child",
    "sqlite_path",
    "start_run",
    "submission_flags",
    "submission_summary",
    "summary_figures",
    "traced_nodes",
    "ui_command",
    "write_ending",
    "write_recipe_catalog",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "Child": "agent.run.children",
    "FINISH_RESERVE_S": "agent.run.finish",
    "GraderError": "agent.run.grading",
    "GraderProcess": "agent.run.grading",
    "Headline": "agent.run.headline",
    "HomeNotWritableError": "agent.run.workspace",
    "ModelNotFoundError": "agent.run.models",
    "PARENT_TAG": "agent.run.tracking",
    "PROPOSERS": "agent.run.plugins",
    "ProposerFactory": "agent.run.plugins",
    "Reporter": "agent.run.reporting",
    "RunConfig": "agent.run.config",
    "RunInterrupted": "agent.run.interrupts",
    "RunPaths": "agent.run.workspace",
    "RunRow": "agent.run.status",
    "StartedRun": "agent.run.startup",
    "Tracker": "agent.run.tracking",
    "atomic_write_json": "agent.run.workspace",
    "atomic_write_text": "agent.run.workspace",
    "best_checkpoint": "agent.run.finish",
    "checkpoint_text": "agent.run.headline",
    "child_span": "agent.run.tracking",
    "close_tracking": "agent.run.finish",
    "collect_runs": "agent.run.status",
    "end_leftovers": "agent.run.leftovers",
    "ended_early": "agent.run.finish",
    "ensure_home": "agent.run.workspace",
    "error_line": "agent.run.finish",
    "failpoint": "agent.run.interrupts",
    "final_figures": "agent.run.results",
    "free_port": "agent.run.grading",
    "interrupted_before_start": "agent.run.finish",
    "interrupts_as_exceptions": "agent.run.interrupts",
    "interrupts_in_main_thread": "agent.run.interrupts",
    "load_config_file": "agent.run.config",
    "locate_run": "agent.run.startup",
    "make_budget": "agent.run.startup",
    "new_run_id": "agent.run.workspace",
    "open_client": "agent.run.tracking",
    "open_sandbox": "agent.run.startup",
    "parse_duration": "agent.run.config",
    "prepare_workspace": "agent.run.workspace",
    "print_summary": "agent.run.finish",
    "read_final": "agent.run.finish",
    "read_state": "agent.run.status",
    "record_run": "agent.run.startup",
    "resolve_base_model": "agent.run.models",
    "result_row": "agent.run.results",
    "review_links": "agent.run.tracking",
    "run_child": "agent.run.children",
    "run_headline": "agent.run.headline",
    "run_page_url": "agent.run.tracking",
    "run_row": "agent.run.status",
    "runs_url": "agent.run.tracking",
    "save_figure": "agent.run.reporting",
    "scores_url": "agent.run.tracking",
    "signal_group": "agent.run.children",
    "spawn_child": "agent.run.children",
    "sqlite_path": "agent.run.tracking",
    "start_run": "agent.run.startup",
    "submission_flags": "agent.run.reporting",
    "submission_summary": "agent.run.finish",
    "summary_figures": "agent.run.results",
    "traced_nodes": "agent.run.tracking",
    "ui_command": "agent.run.tracking",
    "write_ending": "agent.run.finish",
    "write_recipe_catalog": "agent.run.startup",
}


def __getattr__(name: str) -> Any:
    module = _FACE.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = import_module(module) if module == f"{__name__}.{name}" else getattr(import_module(module), name)
    globals()[name] = value
    return value
