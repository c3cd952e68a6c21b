"""Request and response bodies of the run service's API (published in its OpenAPI schema)."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, create_model, model_validator

from agent.core import Proposal, TrialOutcome
from agent.loop import Decision
from agent.run import RunConfig
from agent.service.page_schemas import ApprovalContext
from agent.service.records import WorkerCommand, WorkerState

# Fields the service decides, not the caller: every run it starts lives under the service's RLLOOP_HOME.
SERVICE_OWNED_FIELDS = frozenset({"home"})


def _request_fields() -> dict[str, Any]:
    """RunConfig's fields (types, validators, descriptions) as they are, minus the service-owned ones."""
    return {
        name: (info.annotation, info)
        for name, info in RunConfig.model_fields.items()
        if name not in SERVICE_OWNED_FIELDS
    }


if TYPE_CHECKING:

    class RunRequest(BaseModel):
        run_id: str | None
        benchmark: str

else:
    RunRequest = create_model(
        "RunRequest",
        __config__=ConfigDict(extra="forbid"),
        __doc__="The fields of `rlloop run` (RunConfig) as JSON; omitted fields take the service's RLLOOP_* "
        "environment, then the run defaults.",
        **_request_fields(),
    )


def validate_run_request(values: dict[str, Any], home: Path) -> RunConfig:
    """The run's config, as `rlloop run` makes it: the request's fields, then the service's own RLLOOP_* environment
    (for the fields the caller left out), then the defaults; under the service's home (resolved: the worker runs
    exactly this). Raises pydantic.ValidationError with RunConfig's messages."""
    return RunConfig(**values, home=home.resolve())


class Links(BaseModel):
    """Where to look next."""

    self: str
    cancel: str | None = None
    resume: str | None = None
    mlflow: str | None = None
    page: str = "/"


class WorkerView(BaseModel):
    """The service's worker process for a run (absent for runs started outside the service)."""

    state: WorkerState
    command: WorkerCommand
    pid: int | None = None
    created_at: str
    started_at: str | None = None
    ended_at: str | None = None
    exit_code: int | None = None
    cancel_requested: bool = False
    auto_resumes: int = 0
    log: str = Field(description="Path of the worker's stdout/stderr log.")


class RunSummary(BaseModel):
    """One run, as `rlloop runs` shows it, plus what the service knows of its worker."""

    run_id: str
    status: str = Field(
        description="queued, running, waiting for approval, finished, terminated, interrupted (resumable), "
        "stopped (resumable), cancelled or failed."
    )
    benchmark: str = ""
    base_model: str = ""
    baseline: float | None = Field(default=None, description="The base model's score on the public half.")
    best: float | None = Field(default=None, description="The best submission's score on the public half.")
    best_trial_id: str | None = None
    private_baseline: float | None = Field(
        default=None, description="The base model on the private half, once the run ended."
    )
    private_best: float | None = Field(
        default=None,
        description="The best (chosen on the public half) on the private half, once the run ended.",
    )
    headline: str = Field(
        default="", description="What the run achieved, both halves named (`rlloop runs` says the same)."
    )
    best_checkpoint: str | None = Field(default=None, description="Where the best checkpoint is.")
    submissions: int = 0
    trials: int = 0
    pending_approvals: list[str] = Field(
        default_factory=list, description="Trial ids waiting for a decision."
    )
    managed: bool = Field(description="True when this service started the run (it can cancel and resume it).")
    error: str | None = Field(default=None, description="Why the run failed, from its worker's log.")
    worker: WorkerView | None = None
    links: Links


class TrialView(TrialOutcome):
    """One trial of a run, from the checkpointed state: its proposal's head and what it came to."""

    trial_id: str
    index: int
    status: str
    recipe: str
    hypothesis: str
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    init_from: str | None = None
    parent: str | None = None
    operator: str | None = None


class RunDetail(RunSummary):
    """A run with its trials, its configuration and its MLflow parent run."""

    config: dict[str, Any] = Field(default_factory=dict)
    stop_reason: str | None = None
    current: TrialView | None = Field(default=None, description="The trial in flight, if any.")
    trial_list: list[TrialView] = Field(default_factory=list, description="Finished trials, in order.")
    mlflow_parent: str | None = None
    mlflow_url: str | None = None


class RunCreated(BaseModel):
    """A run accepted by the service: it starts now, or when a slot frees (status `queued`)."""

    run_id: str
    status: str
    links: Links


class PendingApproval(Proposal):
    """A proposal that waits for a reviewer: the proposal as the loop recorded it, and where it waits."""

    run_id: str
    trial_id: str
    index: int
    run_active: bool = Field(
        description="False when the run is stopped: the decision applies when it resumes."
    )
    decide: str = Field(description="POST a DecisionRequest here.")
    context: ApprovalContext | None = Field(
        default=None,
        description="The parent's scores, the diff, the cost estimate, why it waits, the decisions so far.",
    )


class DecisionRequest(BaseModel):
    """A reviewer's decision. `edit` changes hyperparameters (`set`), the code (`train_py`) or the recipe."""

    model_config = ConfigDict(extra="forbid")

    action: Literal["approve", "edit", "reject", "terminate"]
    by: str | None = Field(
        default=None,
        max_length=200,
        description="Who decides, on an open service (--no-auth; default: the service's OS user). Signed in, the "
        "token's user is recorded; a different name is refused.",
    )
    reason: str | None = Field(
        default=None, max_length=4000, description="Required to reject: fed back to the proposer."
    )
    set: dict[str, Any] = Field(default_factory=dict, description="Hyperparameter overrides (edit).")
    train_py: str | None = Field(default=None, description="Replacement training script (edit).")
    recipe: str | None = Field(default=None, description="Replacement recipe (edit).")

    @model_validator(mode="after")
    def _complete(self) -> DecisionRequest:
        if self.action == "reject" and not (self.reason or "").strip():
            raise ValueError("a rejection needs a reason: it is fed back to the proposer")
        if self.action == "edit" and not (self.set or self.train_py is not None or self.recipe):
            raise ValueError(
                "an edit needs `set` (hyperparameters), `train_py` or `recipe`; to accept as is, approve"
            )
        if self.action != "edit" and (self.set or self.train_py is not None or self.recipe):
            raise ValueError("`set`, `train_py` and `recipe` only apply to action 'edit'")
        return self

    def to_decision(self) -> Decision:
        values = self.model_dump(exclude_none=True)
        if not values.get("by", "").strip():
            values.pop("by", None)
        return Decision(**values)


class Identity(BaseModel):
    """The caller, as the service sees its bearer token (`GET /auth/me`)."""

    user: str | None = Field(
        description="The token's user (`admin` for the admin token); null with --no-auth."
    )
    role: Literal["viewer", "approver", "admin"]
    auth_required: bool = Field(description="False only for an open service (--no-auth, loopback only).")


class DecisionRecorded(BaseModel):
    """The decision as written for the waiting run."""

    run_id: str
    trial_id: str
    decision: dict[str, Any]
    path: str
