"""What a proposer sees and what it must return: the contract between the research loop and its brains."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal, Protocol, cast, runtime_checkable

from pydantic import BaseModel, Field, computed_field, model_validator

if TYPE_CHECKING:
    from agent.llm.budget import Budget
    from agent.run.config import RunConfig
    from agent.run.reporting import Reporter
    from agent.run.workspace import RunPaths
    from sandbox.base import Sandbox

TrialStatus = Literal["pending", "running", "succeeded", "failed", "rejected", "skipped"]
Operator = Literal["draft", "improve", "debug", "ablate"]


class SearchDone(Exception):  # noqa: N818 - a signal, not an error
    """Raised by a proposer that has nothing left worth trying (every branch saturated): the run ends early,
    finished, with this exception's message as its stop reason."""


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


class TrialRecord(BaseModel):
    """One trial as the loop remembers it: enough for a proposer to learn from and a person to audit."""

    trial_id: str
    index: int
    proposal: Proposal
    status: TrialStatus = "pending"
    score: float | None = None  # the grader's (public) score of this trial's checkpoint
    submission_id: int | None = None
    train_metrics: dict[str, float] = Field(default_factory=dict)
    error: str | None = None  # one line: what broke
    log_tail: str = ""
    duration_s: float = 0.0  # the host's seconds from preparing the trial to its sandbox's end
    validation_s: float = 0.0  # the host's seconds validating its checkpoint
    checkpoint: str | None = (
        None  # the trial's output checkpoint, relative to the run folder (trials/<id>/output)
    )
    # its digest (sandbox.untrusted.tree_digest) when the trial ended: checked before it is used as a parent or
    # reported as the run's best, and against the one the grader took of what it scored
    checkpoint_sha256: str | None = None
    grading: dict[str, Any] = Field(default_factory=dict)  # the grader's answer to this trial's submission
    approval: dict[str, Any] | None = None  # who decided, when, why (when the approval policy gated it)
    sandbox: dict[str, Any] = Field(default_factory=dict)  # backend and image digest the trial ran with
    # the checkpoint's score on the workspace's public valid split (agent.loop.validation), free of any submission
    valid_score: float | None = None
    valid_ci_low: float | None = None
    valid_ci_high: float | None = None
    valid_n: int | None = None
    submission_note: str | None = None  # why the submission policy sent it to the grader or kept it back

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
    # where the run's files are, so a proposer can check the paths it proposes (agent.loop.proposal_paths); None: unknown
    workspace: str | None = None
    base_model_path: str | None = None


class RunView(Protocol):
    """What a proposer may read of the run it proposes for (`agent.loop.resources.RunResources` is one)."""

    @property
    def config(self) -> RunConfig: ...

    @property
    def paths(self) -> RunPaths: ...

    @property
    def reporter(self) -> Reporter: ...

    @property
    def sandbox(self) -> Sandbox: ...

    @property
    def budget(self) -> Budget: ...

    @property
    def base_model(self) -> Path: ...

    def secrets(self) -> tuple[str, ...]:
        """What no result shown to a proposer may carry (the grader's token)."""
        ...


@runtime_checkable
class Proposes(Protocol):
    """The least a proposer plugin implements: a name and `propose` (`make_proposer` gives it the hooks' defaults)."""

    name: str

    def propose(self, context: ProposalContext) -> Proposal: ...


@runtime_checkable
class Proposer(Proposes, Protocol):
    """Chooses the next experiment from what earlier trials scored. What the loop calls:

    - `propose` for each trial;
    - `attach_run(run, trial_id)` before each proposal: the run (`RunView`: its folders, sandbox, budget, log,
      config), for a proposer that uses tools, the run log or the memory of earlier runs;
    - `repair(proposal, failure)` when a proposal's training code fails its check: a fixed proposal, or None when
      this proposer cannot repair code (the trial then fails with the check's message).

    `ProposerBase` has the defaults (nothing to attach, no repair)."""

    def attach_run(self, run: RunView, trial_id: str) -> None: ...

    def repair(self, proposal: Proposal, failure: str) -> Proposal | None: ...


class ProposerBase:
    """The hooks' defaults: a proposer that needs nothing of the run and cannot repair code. The built-in
    proposers derive from it."""

    def attach_run(self, run: RunView, trial_id: str) -> None:
        return None

    def repair(self, proposal: Proposal, failure: str) -> Proposal | None:
        return None


class WithDefaults(ProposerBase):
    """A plugin proposer that implements only `name` and `propose`, given the hooks' defaults."""

    def __init__(self, inner: Proposes) -> None:
        self.inner = inner
        self.name = inner.name

    def propose(self, context: ProposalContext) -> Proposal:
        return self.inner.propose(context)


def with_hooks(proposer: Proposes) -> Proposer:
    """`proposer` as the loop calls it: itself when it derives from `ProposerBase`, else with the defaults."""
    if isinstance(proposer, ProposerBase):
        return cast(Proposer, proposer)
    return cast(Proposer, WithDefaults(proposer))
