"""How one `rlloop serve` instance is set up: where runs live, how many run at once, where MLflow's UI is."""

from __future__ import annotations

import sys
from pathlib import Path

from pydantic import BaseModel, Field, model_validator


class ServiceSettings(BaseModel):
    """Settings of the run service. `home` is the RLLOOP_HOME every run it starts is written under."""

    home: Path = Field(default=Path(".rlloop"), description="RLLOOP_HOME: runs, models and the MLflow store.")
    max_concurrent_runs: int = Field(
        default=2, ge=1, le=64, description="Workers running at once; more wait as queued."
    )
    mlflow_ui_url: str = Field(
        default="http://127.0.0.1:5000",
        description="Base URL of the MLflow UI (`rlloop ui`), for links to a run's page.",
    )
    python: str = Field(
        default=sys.executable, description="Interpreter that runs a run's worker (`python -m agent.launch`)."
    )
    poll_interval_s: float = Field(
        default=0.25, gt=0, le=10, description="How often the supervisor checks its workers."
    )
    max_auto_resumes: int = Field(
        default=3, ge=0, description="Recoveries of one run after crashes, before giving up."
    )
    stop_runs_on_shutdown: bool = Field(
        default=False,
        description="SIGTERM every running worker when the service stops. Off by default: workers are detached, "
        "keep running, and the next service start adopts them.",
    )
    users_file: Path | None = Field(
        default=None,
        description="Users and their hashed tokens (default HOME/service_users.json); RLLOOP_SERVICE_TOKENS adds "
        "more. Every request but /health and the page needs a bearer token, unless no_auth.",
    )
    require_auth: bool = Field(
        default=False,
        description="Demand tokens (the default already does, unless no_auth; the two cannot be combined).",
    )
    no_auth: bool = Field(
        default=False,
        description="Open service: no tokens, anyone who can reach it (loopback only) may start runs and approve. "
        "Off by default: without users the first start makes an admin token in HOME/service_admin_token (0600).",
    )

    @model_validator(mode="after")
    def _auth_mode(self) -> ServiceSettings:
        if self.no_auth and self.require_auth:
            raise ValueError("no_auth and require_auth contradict each other: choose one")
        return self
