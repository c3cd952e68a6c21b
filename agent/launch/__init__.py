"""`launch(config)`: the one way a run starts or resumes, from `rlloop run`/`resume` (and so from the service's
workers, which run them), from a sweep's worker, or from code that embeds rlloop."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from agent.run import RunConfig

__all__ = ["launch"]


def launch(
    config: RunConfig, *, resume_run_id: str | None = None, external_agent: str | Path | None = None
) -> dict[str, Any]:
    """Run `config` to its end (or resume `resume_run_id`) and return the run's summary. With `external_agent` (a
    coding agent's name or an agent folder) that agent works against the grader instead of rlloop's own loop."""
    if external_agent is not None:
        from agent.external import run_external

        return run_external(config, external_agent, resume_run_id=resume_run_id)
    from agent.loop import execute

    return execute(config, resume_run_id=resume_run_id)
