"""Response bodies of the run page, the trial view and the approval card's context (`GET /runs/{id}/view`, ...).

Kept apart from `schemas.py` (the run API's bodies): these exist for people deciding and reviewing, and grow with the
page. Everything here is data; the page draws it with textContent, never as HTML.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.status import Headline

NodeState = Literal["base", "graded", "kept back", "failed", "rejected", "pending", "running"]


class Scored(BaseModel):
    """A score with its 95% CI and sample count (any of them may be unknown)."""

    score: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None


class TreeNode(BaseModel):
    """One node of the trial tree: the base model, a trial, or the proposal in flight."""

    id: str
    parent: str | None = Field(description="The node it branches from; null only for the base model.")
    operator: str | None = Field(
        default=None, description="draft, improve, debug or ablate (the edge's label)."
    )
    state: NodeState
    recipe: str | None = None
    hypothesis: str = ""
    valid: Scored = Field(default_factory=Scored)
    public: Scored = Field(default_factory=Scored)
    best: bool = False
    note: str | None = Field(default=None, description="Why it failed, was kept back or rejected.")


class Submission(BaseModel):
    """One graded checkpoint, in submission order. `private_score` appears once the run ended (finalized)."""

    submission_id: int
    trial_id: str | None = None
    score: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    private_score: float | None = None
    elapsed_s: float | None = None
    flags: list[str] = Field(default_factory=list)


class ScoreSeries(BaseModel):
    """The score over submissions, as the grader mirrors it (scores.json): public, and private once finalized."""

    baseline: Scored = Field(default_factory=Scored)
    baseline_private: float | None = None
    submissions: list[Submission] = Field(default_factory=list)
    finalized: bool = False


class BudgetLine(BaseModel):
    """One resource: what is spent, against which cap (null: no cap)."""

    name: str
    unit: str
    spent: float
    cap: float | None = None


class DecisionEntry(BaseModel):
    """A reviewer's decision on one proposal of the run."""

    trial_id: str
    action: str
    by: str | None = None
    at: str | None = None
    reason: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)


class HyperparameterChange(BaseModel):
    """A hyperparameter of a proposal and what it replaced (the parent's value, else the recipe's default)."""

    name: str
    value: Any = None
    replaced: Any = None
    replaced_from: Literal["parent", "recipe default", "new"] = "new"
    changed: bool = False


class FieldSpec(BaseModel):
    """An edit-form field, from the recipe's config schema: the page validates a value before sending it."""

    name: str
    type: Literal["number", "integer", "boolean", "string", "enum", "json"]
    value: Any = None
    proposed: bool = Field(
        description="True when the proposal sets it (shown first); false: the recipe's default."
    )
    default: Any = None
    minimum: float | None = None
    maximum: float | None = None
    exclusive_minimum: float | None = None
    exclusive_maximum: float | None = None
    choices: list[Any] = Field(default_factory=list)
    nullable: bool = False
    description: str = ""


class CodeView(BaseModel):
    """What a trial runs: its own train.py or a recipe's source, and a unified diff against what it came from."""

    kind: Literal["train_py", "recipe"]
    source_name: str = Field(description="train.py, or the recipe's module file.")
    against: str = Field(
        description="What the diff compares with: the parent's code, or the recipe's source."
    )
    code: str = ""
    diff: str = Field(default="", description="Unified diff; empty when the code is unchanged.")
    truncated: bool = False


class ApprovalContext(BaseModel):
    """What an approver needs beside the proposal: where it branches from, what it changes, costs and why it waits."""

    parent: TreeNode | None = Field(
        default=None, description="The parent trial (or base model) with its scores."
    )
    operator: str = "draft"
    changes: list[HyperparameterChange] = Field(default_factory=list)
    code: CodeView | None = None
    config_diff: str = Field(
        default="", description="Unified diff of the hyperparameters against the parent's."
    )
    estimated_compute_s: float | None = None
    estimated_usd: float | None = Field(
        default=None,
        description="Dollars the trial adds: LLM spend only, and a trial calls no LLM (0.0).",
    )
    budget: list[BudgetLine] = Field(default_factory=list)
    policy: str = ""
    asked_because: list[str] = Field(default_factory=list, description="Which parts of the policy gated it.")
    history: list[DecisionEntry] = Field(default_factory=list)
    failures: list[TreeNode] = Field(default_factory=list, description="Trials that failed so far, and why.")
    fields: list[FieldSpec] = Field(default_factory=list)
    notes: list[str] = Field(default_factory=list, description="What could not be shown yet, and why.")


class RunPage(BaseModel):
    """Everything the run page draws, in one body (its ETag changes only when something on it does)."""

    run_id: str
    status: str
    benchmark: str = ""
    base_model: str = ""
    stop_reason: str | None = None
    headline: Headline = Field(
        default_factory=Headline,
        description="What the run achieved, both halves named, in words and figures.",
    )
    approval_policy: str = Field(default="", description="When the run asks a person (`--approval`).")
    waiting: list[str] = Field(default_factory=list, description="Trial ids waiting for a person.")
    nodes: list[TreeNode] = Field(default_factory=list)
    scores: ScoreSeries = Field(default_factory=ScoreSeries)
    budget: list[BudgetLine] = Field(default_factory=list)
    trials_done: int = 0
    trials_planned: int | None = None
    history: list[DecisionEntry] = Field(default_factory=list)
    mlflow_url: str | None = None
    mlflow_runs_url: str | None = Field(
        default=None, description="The run's experiment, training runs table."
    )
    mlflow_scores_url: str | None = Field(
        default=None, description="The MLflow parent run's metric charts: score over submissions."
    )
    links: dict[str, str | None] = Field(default_factory=dict)


class MetricSeries(BaseModel):
    """One training metric over steps, from the trial's log history."""

    name: str
    steps: list[float] = Field(default_factory=list)
    values: list[float] = Field(default_factory=list)


class FailureCluster(BaseModel):
    """Validation samples the checkpoint got wrong, grouped by how (no answer, wrong number, ...)."""

    kind: str
    count: int
    examples: list[dict[str, Any]] = Field(default_factory=list)


class TrialDetail(BaseModel):
    """One trial for a reviewer: proposal, code, log, metrics, failures on valid, the grader's answer."""

    run_id: str
    trial_id: str
    node: TreeNode
    proposal: dict[str, Any] = Field(default_factory=dict)
    changes: list[HyperparameterChange] = Field(default_factory=list)
    code: CodeView | None = None
    config_diff: str = ""
    log_tail: str = Field(default="", description="The end of the trial's log.txt (its last 16 KiB at most).")
    log_truncated: bool = Field(default=False, description="Earlier lines of the log were left out.")
    train_metrics: dict[str, float] = Field(default_factory=dict)
    metric_series: list[MetricSeries] = Field(default_factory=list)
    failures: list[FailureCluster] = Field(default_factory=list)
    valid_n: int | None = None
    grading: dict[str, Any] = Field(default_factory=dict)
    tool_calls: list[dict[str, Any]] = Field(default_factory=list)
    approval: dict[str, Any] | None = None
    duration_s: float = 0.0
    wall_s: float = Field(
        default=0.0,
        description="What the trial cost: its sandbox and its validation (what the budget counts).",
    )
    train_s: float | None = Field(default=None, description="Of which training, as the trainer reported it.")
    notes: list[str] = Field(default_factory=list, description="Files that could not be read, and why.")
    run_waiting: list[str] = Field(
        default_factory=list, description="The run's proposals waiting for a person."
    )
