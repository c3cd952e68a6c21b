"""Human approval of proposals: the policy that gates them, the decisions people make, and where both are kept.

A gated proposal stops the graph in its `approve` node (a LangGraph interrupt). What waits is published as
`runs/<run_id>/approvals/<trial_id>.pending.json`; a decision arrives as `<trial_id>.decision.json`, written
atomically by `rlloop approve`, the service's API or its web page, and the waiting run resumes with it.
"""

from __future__ import annotations

import getpass
import json
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from agent.core import Proposal, TrialRecord
from tasks.atomic import atomic_write_json


class Decision(BaseModel):
    """What a reviewer decided about a proposal, and who, when and why."""

    action: Literal["approve", "edit", "reject", "terminate"]
    by: str = Field(default_factory=lambda: _whoami())
    at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))
    reason: str | None = None
    set: dict[str, Any] = Field(default_factory=dict)  # hyperparameter overrides (edit)
    train_py: str | None = None  # replacement code (edit)
    recipe: str | None = None

    def apply(self, proposal: Proposal) -> Proposal:
        if self.action != "edit":
            return proposal
        updated = proposal.model_copy(deep=True)
        updated.hyperparameters.update(self.set)
        if self.train_py is not None:
            updated.train_py = self.train_py
        if self.recipe:
            updated.recipe = self.recipe
        return updated


def _whoami() -> str:
    try:
        return getpass.getuser()
    except Exception:
        return "unknown"


def policy_requires(policy: str, proposal: Proposal, budget_threshold_s: float) -> bool:
    """True when any part of a comma-combined policy (never, always, code, budget) gates this proposal."""
    parts = {p.strip() for p in policy.split(",")}
    if "always" in parts:
        return True
    if "code" in parts and proposal.train_py:
        return True
    cost = proposal.estimated_cost_s or float(proposal.hyperparameters.get("max_seconds", 0) or 0)
    return "budget" in parts and cost > budget_threshold_s


def _dir(run_dir: Path) -> Path:
    return run_dir / "approvals"


def publish_pending(run_dir: Path, record: TrialRecord) -> None:
    atomic_write_json(_dir(run_dir) / f"{record.trial_id}.pending.json", record.model_dump(mode="json"))


def clear_pending(run_dir: Path, trial_id: str) -> None:
    (_dir(run_dir) / f"{trial_id}.pending.json").unlink(missing_ok=True)
    decision = _dir(run_dir) / f"{trial_id}.decision.json"
    if decision.exists():
        decision.rename(_dir(run_dir) / f"{trial_id}.decided.json")


def list_pending(runs_dir: Path) -> list[tuple[str, TrialRecord]]:
    """(run_id, trial) for every proposal that waits for a decision, across runs."""
    found: list[tuple[str, TrialRecord]] = []
    for path in sorted(runs_dir.glob("*/approvals/*.pending.json")):
        try:
            found.append((path.parent.parent.name, TrialRecord.model_validate_json(path.read_text())))
        except (OSError, ValueError):
            continue
    return found


def write_decision(run_dir: Path, trial_id: str, decision: Decision) -> Path:
    pending = _dir(run_dir) / f"{trial_id}.pending.json"
    if not pending.exists():
        raise LookupError(
            f"nothing waits for approval as {trial_id} in {run_dir.name}; `rlloop approvals` lists them"
        )
    target = _dir(run_dir) / f"{trial_id}.decision.json"
    atomic_write_json(target, decision.model_dump(mode="json"))
    return target


def read_decision(run_dir: Path, trial_id: str) -> Decision | None:
    path = _dir(run_dir) / f"{trial_id}.decision.json"
    if not path.exists():
        return None
    return Decision.model_validate(json.loads(path.read_text()))


def wait_for_decision(run_dir: Path, trial_id: str, poll_s: float = 0.5) -> Decision:
    """Block until a decision for this trial arrives (Ctrl-C leaves the run resumable)."""
    while True:
        decision = read_decision(run_dir, trial_id)
        if decision is not None:
            return decision
        time.sleep(poll_s)
