"""`launch(config)`: the one way a run starts or resumes, from `rlloop run`/`resume`, from the service's workers
(`python -m agent.launch FILE`, a `LaunchRequest`), from a sweep's worker, or from code that embeds rlloop."""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError

from agent.run import RunConfig

__all__ = ["LaunchRequest", "launch", "launch_to_exit"]


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


def launch_to_exit(
    config: RunConfig,
    *,
    error: Callable[[str], None],
    resume_run_id: str | None = None,
    external_agent: str | Path | None = None,
) -> int:
    """`launch` as a command runs it (`rlloop run`/`resume`, the service's workers): its exit code (0 ended, 1 the
    run failed, 2 it could not start, 130 interrupted), each reason handed to `error` as one line (the service
    shows a worker log's last `error:` line as the run's error). Other exceptions propagate, with their traceback."""
    from agent.run import GraderError, HomeNotWritableError, ModelNotFoundError
    from sandbox.base import SandboxUnavailableError
    from tasks.plugins import UnknownPluginError

    try:
        summary = launch(config, resume_run_id=resume_run_id, external_agent=external_agent)
    except (
        UnknownPluginError,
        ModelNotFoundError,
        HomeNotWritableError,
        GraderError,
        SandboxUnavailableError,
        FileNotFoundError,
        FileExistsError,
        ValueError,
    ) as exc:
        error(str(exc))
        return 2
    if summary.get("status") == "interrupted":
        return 130
    if summary.get("status") == "failed":
        error(f"the run ended early: {summary.get('stop_reason')}")
        return 1
    return 0


class LaunchRequest(BaseModel):
    """A run to launch in a process of its own (`python -m agent.launch FILE`): its config as the caller already
    validated it (a full dump: the child's environment plays no part), and what `launch` takes besides."""

    config: RunConfig
    resume_run_id: str | None = None
    external_agent: str | None = Field(default=None, description="A coding agent's name or an agent folder.")


def main(argv: list[str]) -> int:
    """`python -m agent.launch FILE`: launch the run the `LaunchRequest` in FILE describes; the exit code says how
    it ended (`launch_to_exit`), a reason on stderr as `error: ...`."""

    def error(line: str) -> None:
        print(f"error: {line}", file=sys.stderr, flush=True)

    (path,) = argv
    try:
        request = LaunchRequest.model_validate_json(Path(path).read_text())
    except (OSError, ValidationError) as exc:
        error(f"cannot read the run request {path}: {exc}")
        return 2
    return launch_to_exit(
        request.config,
        error=error,
        resume_run_id=request.resume_run_id,
        external_agent=request.external_agent,
    )
