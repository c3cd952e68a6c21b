"""The run's records: what a proposer proposes, what the loop remembers of each trial, what a proposer may see,
and a checkpoint's score on the valid split. Plain pydantic data at the bottom of agent/: it imports nothing of
rlloop, so every part above (run, proposers, loop, service, sweeps, external) shares one definition."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field, model_validator

__all__ = [
    "BaselineScore",
    "CEILING",
    "Operator",
    "Proposal",
    "ProposalContext",
    "TrialOutcome",
    "TrialRecord",
    "TrialStatus",
    "ValidSample",
    "Validation",
]

CEILING = 0.99  # a valid CI lower bound at or above this: the score cannot rise beyond noise

TrialStatus = Literal["pending", "running", "succeeded", "failed", "rejected", "skipped"]
Operator = Literal["draft", "improve", "debug", "ablate"]


class Proposal(BaseModel):
    """The next experiment: which recipe, with which hyperparameters, starting from which checkpoint."""

    hypothesis: str = Field(description="What this trial tests, in one sentence.")
    rationale: str = Field(default="", description="Why, given the trials so far.")
    recipe: str = Field(
        description="A trainer recipe name, e.g. 'sft' or 'grpo' (see `python -m trainers --list`)."
    )
    hyperparameters: dict[str, Any] = Field(
        default_factory=dict, description="Fields of the recipe's config, e.g. learning_rate, max_steps."
    )
    init_from: str | None = Field(
        default=None,
        description="trial_id whose checkpoint to continue from; None starts from the base model.",
    )
    train_py: str | None = Field(
        default=None,
        description="Optional training script run instead of the recipe; it must write a checkpoint.",
    )
    estimated_cost_s: float | None = Field(default=None, description="Estimated compute seconds.")
    parent: str | None = Field(
        default=None,
        description="The node of the search tree this trial branches from: a finished trial id, or None for the "
        "base model. The same as init_from (either may be given; they must agree).",
    )
    operator: Operator = Field(
        default="draft",
        description="draft: a new line of attack from the base model; improve: a step on from the parent; debug: "
        "repair a failed trial; ablate: change one thing of an earlier trial from the same parent.",
    )

    @model_validator(mode="before")
    @classmethod
    def _parent_is_init_from(cls, data: Any) -> Any:
        """`parent` names the tree node, `init_from` the checkpoint trained from: one fact, kept in both fields
        (old proposals and old checkpoints have only init_from); the operator defaults from it."""
        if not isinstance(data, dict):
            return data
        parent, start = data.get("parent"), data.get("init_from")
        if parent is not None and start is not None and parent != start:
            raise ValueError(
                f"parent {parent!r} and init_from {start!r} differ; give one of them (they name the same trial)"
            )
        node = parent if parent is not None else start
        data = {**data, "parent": node, "init_from": node}
        if data.get("operator") is None:
            data["operator"] = "draft" if node is None else "improve"
        return data


class TrialOutcome(BaseModel):
    """What a trial came to: the fields the loop records (`TrialRecord`) and the service shows (its TrialView)
    alike, defined once so a field added here reaches both."""

    score: float | None = None  # the grader's (public) score of this trial's checkpoint
    submission_id: int | None = None
    error: str | None = None  # one line: what broke
    duration_s: float = 0.0  # the host's seconds from preparing the trial to its sandbox's end
    train_metrics: dict[str, float] = Field(default_factory=dict)
    approval: dict[str, Any] | None = None  # who decided, when, why (when the approval policy gated it)
    # the checkpoint's score on the workspace's public valid split (agent.loop.validation), free of any submission
    valid_score: float | None = None
    valid_ci_low: float | None = None
    valid_ci_high: float | None = None
    valid_n: int | None = None
    submission_note: str | None = None  # why the submission policy sent it to the grader or kept it back


class TrialRecord(TrialOutcome):
    """One trial as the loop remembers it: enough for a proposer to learn from and a person to audit."""

    trial_id: str
    index: int
    proposal: Proposal
    status: TrialStatus = "pending"
    log_tail: str = ""
    validation_s: float = 0.0  # the host's seconds validating its checkpoint
    # the trial's output checkpoint, relative to the run folder (trials/<id>/output)
    checkpoint: str | None = None
    # its digest (sandbox.untrusted.tree_digest) when the trial ended: checked before it is used as a parent or
    # reported as the run's best, and against the one the grader took of what it scored
    checkpoint_sha256: str | None = None
    grading: dict[str, Any] = Field(default_factory=dict)  # the grader's answer to this trial's submission
    sandbox: dict[str, Any] = Field(default_factory=dict)  # backend and image digest the trial ran with

    @computed_field  # type: ignore[prop-decorator]
    @property
    def wall_s(self) -> float:
        """What the trial cost, as a user pays it: preparing, training in the sandbox (start-up, load, save) and
        validating its checkpoint. The run's compute budget and every report count this; the trial's own
        training seconds (train_metrics["train_seconds"]) are shown beside it."""
        return round(self.duration_s + self.validation_s, 2)

    @property
    def train_s(self) -> float | None:
        """The trainer's own training seconds (as its metrics.json said: the trial's word, for display only)."""
        return self.train_metrics.get("train_seconds")


class ProposalContext(BaseModel):
    """Everything a proposer may use to decide. Never contains hidden test data."""

    run_id: str
    benchmark: str
    benchmark_description: str
    base_model: str
    baseline_score: float | None
    # the base model's score on the valid split, with its 95% CI (None: not validated)
    baseline_valid_score: float | None = None
    baseline_valid_ci: tuple[float, float] | None = None
    best_score: float | None
    best_trial_id: str | None
    trials: list[TrialRecord]
    trials_left: int
    seconds_left: float
    submissions_left: int | None = None
    recipes: list[str] = Field(default_factory=list)
    seed: int = 0
    # wall seconds each trial gets when the run fixes them (`--trial-seconds`); None: a share of the time left
    trial_seconds: float | None = None
    # wall seconds of trials the run may still spend (`--max-compute-s` less what was spent); None: no such cap
    compute_left_s: float | None = None
    feedback: str | None = None  # e.g. a human's rejection reason for the previous proposal
    # where the run's files are, so a proposer can check the paths it proposes (agent.proposers.proposal_paths); None: unknown
    workspace: str | None = None
    base_model_path: str | None = None
    # the recipes' defaults that fit the base model where they differ from the recipes' own (trainers.model_fit:
    # a pretrained model's rates, batches, threads); empty for a model rlloop built, which keeps the recipes' own
    recipe_defaults: dict[str, dict[str, Any]] = Field(default_factory=dict)
    # the longest trial a proposer gives when the run leaves trial length to it (None: the proposer's own cap)
    max_trial_seconds: float | None = None


class BaselineScore(BaseModel):
    """The base model's score on n samples, with its 95% CI where known: on the hidden test set (the grader's
    baseline) or on the public valid split. What the loop keeps of a baseline in its state."""

    score: float
    n: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None

    @property
    def ci(self) -> tuple[float, float] | None:
        return None if self.ci_low is None or self.ci_high is None else (self.ci_low, self.ci_high)


class ValidSample(BaseModel):
    id: str
    prompt: str
    expected: str
    got: str
    correct: float


class Validation(BaseModel):
    """One checkpoint's score on the valid split, with its bootstrap CI and every sample's answer."""

    score: float
    n: int
    ci_low: float
    ci_high: float
    seconds: float = 0.0
    planned: int | None = None  # the samples it would have scored, when it stopped once its answer was clear
    samples: list[ValidSample] = Field(default_factory=list)

    def text(self) -> str:
        return f"{self.score:.3f} [{self.ci_low:.3f},{self.ci_high:.3f}]"

    def by_id(self) -> dict[str, float]:
        return {s.id: s.correct for s in self.samples}
