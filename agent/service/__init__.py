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
    users_file: Path | None = None,
) -> None:
    """Run the service with uvicorn until Ctrl-C. Runs it started keep going unless stop_runs_on_shutdown.

    Raises auth.InsecureBindError when `host` is not loopback and no admin user is configured."""
    import uvicorn

    from agent.service.app import create_app as build
    from agent.service.auth import check_bind, env_users, is_loopback, read_users_file, users_file_for

    home = home or Path(os.environ.get("RLLOOP_HOME", ".rlloop"))
    users_path = users_file_for(home, users_file)
    check_bind(host, [*read_users_file(users_path), *env_users()], users_path)
    settings = ServiceSettings(
        home=home,
        max_concurrent_runs=max_concurrent_runs,
        mlflow_ui_url=mlflow_ui_url,
        stop_runs_on_shutdown=stop_runs_on_shutdown,
        users_file=users_file,
        require_auth=not is_loopback(host),
    )
    uvicorn.run(build(settings), host=host, port=port, log_level="info")
