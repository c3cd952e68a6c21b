"""`rlloop serve`: the run service (HTTP API + approvals page) over one RLLOOP_HOME."""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING

from agent.service.settings import ServiceSettings

if TYPE_CHECKING:
    from fastapi import FastAPI

__all__ = ["ServiceSettings", "create_app", "serve"]


def create_app(settings: ServiceSettings) -> FastAPI:
    """The service's FastAPI app (imported lazily: `import agent.service` stays light)."""
    from agent.service.app import create_app as build

    return build(settings)


def serve(
    host: str = "127.0.0.1",
    port: int = 8765,
    home: Path | None = None,
    max_concurrent_runs: int = 2,
    mlflow_ui_url: str = "http://127.0.0.1:5000",
    stop_runs_on_shutdown: bool = False,
) -> None:
    """Run the service with uvicorn until Ctrl-C. Runs it started keep going unless stop_runs_on_shutdown."""
    import uvicorn

    from agent.service.app import create_app as build

    settings = ServiceSettings(
        home=home or Path(os.environ.get("RLLOOP_HOME", ".rlloop")),
        max_concurrent_runs=max_concurrent_runs,
        mlflow_ui_url=mlflow_ui_url,
        stop_runs_on_shutdown=stop_runs_on_shutdown,
    )
    uvicorn.run(build(settings), host=host, port=port, log_level="info")
