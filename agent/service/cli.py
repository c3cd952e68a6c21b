"""The `rlloop serve` command, ready to mount on the main Typer app: `app.command("serve")(serve_command)`."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer


def serve_command(
    host: Annotated[str, typer.Option(help="Interface to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    home: Annotated[Path | None, typer.Option(help="RLLOOP_HOME (default ./.rlloop).")] = None,
    max_concurrent_runs: Annotated[int, typer.Option(min=1, help="Runs at once; more wait as queued.")] = 2,
    mlflow_ui_url: Annotated[
        str, typer.Option(help="Base URL of the MLflow UI, for links.")
    ] = "http://127.0.0.1:5000",
    stop_runs_on_shutdown: Annotated[
        bool,
        typer.Option(help="SIGTERM running workers when the service stops (default: they keep running)."),
    ] = False,
) -> None:
    """Serve the run API and the approvals page (http://HOST:PORT/, API docs at /docs)."""
    from agent.service import serve

    serve(host, port, home, max_concurrent_runs, mlflow_ui_url, stop_runs_on_shutdown)


def main() -> None:
    typer.run(serve_command)
