"""One run's setup, shared by the research loop and external agents: its config and the surfaces it is given
through (`config`, `options`; `plugins`: the proposers' registry it names), its folders (`workspace`), its base
model (`models`), its grader process (`grading`), its log (`reporting`), its record and sandbox (`startup`), and
what an earlier attempt left (`leftovers`). Its end: `agent.results`; MLflow: `agent.tracking`."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import lazy_face

if TYPE_CHECKING:
    from agent.run.config import (
        RUN_ID_PATTERN,
        RUN_ID_RULE,
        Duration,
        RunConfig,
        load_config_file,
        parse_duration,
        run_config_of,
    )
    from agent.run.grading import GraderError, GraderProcess
    from agent.run.leftovers import end_leftovers
    from agent.run.model_check import check_base_model
    from agent.run.models import ModelNotFoundError, first_use_note, resolve_base_model
    from agent.run.options import flag_name, run_config_fields, run_config_options
    from agent.run.plugins import PROPOSERS
    from agent.run.reporting import Reporter
    from agent.run.startup import locate_run, open_sandbox, record_run
    from agent.run.workspace import HomeNotWritableError, RunPaths, ensure_home, new_run_id, prepare_workspace

__all__ = [
    "first_use_note",
    "check_base_model",
    "Duration",
    "GraderError",
    "GraderProcess",
    "HomeNotWritableError",
    "ModelNotFoundError",
    "PROPOSERS",
    "RUN_ID_PATTERN",
    "RUN_ID_RULE",
    "Reporter",
    "RunConfig",
    "RunPaths",
    "end_leftovers",
    "ensure_home",
    "flag_name",
    "load_config_file",
    "locate_run",
    "new_run_id",
    "open_sandbox",
    "parse_duration",
    "prepare_workspace",
    "record_run",
    "resolve_base_model",
    "run_config_fields",
    "run_config_of",
    "run_config_options",
]

# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "check_base_model": "agent.run.model_check",
    "first_use_note": "agent.run.models",
    "Duration": "agent.run.config",
    "GraderError": "agent.run.grading",
    "GraderProcess": "agent.run.grading",
    "HomeNotWritableError": "agent.run.workspace",
    "ModelNotFoundError": "agent.run.models",
    "PROPOSERS": "agent.run.plugins",
    "RUN_ID_PATTERN": "agent.run.config",
    "RUN_ID_RULE": "agent.run.config",
    "Reporter": "agent.run.reporting",
    "RunConfig": "agent.run.config",
    "RunPaths": "agent.run.workspace",
    "end_leftovers": "agent.run.leftovers",
    "ensure_home": "agent.run.workspace",
    "flag_name": "agent.run.options",
    "load_config_file": "agent.run.config",
    "locate_run": "agent.run.startup",
    "new_run_id": "agent.run.workspace",
    "open_sandbox": "agent.run.startup",
    "parse_duration": "agent.run.config",
    "prepare_workspace": "agent.run.workspace",
    "record_run": "agent.run.startup",
    "resolve_base_model": "agent.run.models",
    "run_config_fields": "agent.run.options",
    "run_config_of": "agent.run.config",
    "run_config_options": "agent.run.options",
}


__getattr__ = lazy_face(__name__, _FACE)
