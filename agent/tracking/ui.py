"""`rlloop ui`: the MLflow UI on a home's store, lean, served through rlloop's review app when it is installed."""

from __future__ import annotations

import os
import sys
from pathlib import Path


def ui_command(root: Path, *, host: str, port: int, workers: int = 1) -> tuple[list[str], dict[str, str]]:
    """The MLflow UI on a run store, lean: `workers` server processes (uvicorn runs one in-process) and no job
    runners (MLflow 3 starts huey consumers for its GenAI jobs by default; rlloop queues none); served through
    `agent.tracking.mlflow_app`, so a fresh browser opens an experiment on its training runs, not the GenAI overview."""
    cmd = [
        sys.executable,
        "-m",
        "mlflow",
        "ui",
        "--backend-store-uri",
        f"sqlite:///{root / 'mlflow.db'}",
        "--default-artifact-root",
        (root / "mlartifacts").as_uri(),
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
    ]
    if _review_app_installed():
        cmd += ["--app-name", REVIEW_APP]  # MLflow's app, opening a fresh browser on the training runs
    env = {**os.environ, "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
    return cmd, env


REVIEW_APP = "rlloop-review"  # the `mlflow.app` entry point of agent.tracking.mlflow_app
REVIEW_APP_TARGET = "agent.tracking.mlflow_app:app"


def _review_app_installed() -> bool:
    """Whether this environment's rlloop was installed with its `mlflow.app` entry point naming this version's app
    (an install from before it was added, or from before it moved, has not: `pip install -e .` again); without it
    `rlloop ui` serves MLflow's plain app rather than fail on an app that is not there."""
    from importlib.metadata import entry_points

    return any(
        e.name == REVIEW_APP and e.value == REVIEW_APP_TARGET for e in entry_points(group="mlflow.app")
    )
