"""The trials so far as a tree: which trial continued from which checkpoint, what it changed, what it scored.

A flat list hides the structure a driver model most needs: that t4 was t2 with a lower learning rate, and that this
branch beat its parent. Each line carries status, score (and its gain over the parent, the baseline for roots),
the change against the parent's proposal, and for failures the error line.
"""

from __future__ import annotations

import json
from typing import Any

from agent.core import Proposal, TrialRecord

MAX_TEXT = 200
MAX_METRICS = 4


def _fmt_value(value: Any) -> str:
    if isinstance(value, float):
        return f"{value:.6g}"
    if isinstance(value, str):
        return value
    return json.dumps(value, sort_keys=True, default=str)


def _clip(text: str, limit: int = MAX_TEXT) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def proposal_changes(proposal: Proposal, parent: Proposal | None) -> str:
    """What this proposal sets, or changes against its parent's: 'recipe sft -> grpo; learning_rate 0.001 -> 0.0003'."""
    parts: list[str] = []
    if parent is None:
        parts.append(f"recipe {proposal.recipe}")
        parts += [
            f"{key}={_fmt_value(proposal.hyperparameters[key])}" for key in sorted(proposal.hyperparameters)
        ]
    else:
        if proposal.recipe != parent.recipe:
            parts.append(f"recipe {parent.recipe} -> {proposal.recipe}")
        for key in sorted(set(proposal.hyperparameters) | set(parent.hyperparameters)):
            old, new = parent.hyperparameters.get(key), proposal.hyperparameters.get(key)
            if key not in proposal.hyperparameters:
                parts.append(f"{key} {_fmt_value(old)} -> (default)")
            elif key not in parent.hyperparameters:
                parts.append(f"{key} (default) -> {_fmt_value(new)}")
            elif old != new:
                parts.append(f"{key} {_fmt_value(old)} -> {_fmt_value(new)}")
    if proposal.train_py:
        parts.append(f"custom train.py ({len(proposal.train_py.splitlines())} lines)")
    if parent is not None and not parts:
        parts.append("no change (same recipe and hyperparameters)")
    return "; ".join(parts)


def _score_text(trial: TrialRecord, parent_score: float | None) -> str:
    if trial.score is None:
        text = "not scored" if trial.valid_score is None else "not submitted"
    else:
        text = f"score={trial.score:.4f}"
        if parent_score is not None:
            text += f" ({trial.score - parent_score:+.4f} vs parent)"
    if trial.valid_score is not None:  # the free score on the public valid split, with its 95% CI
        text += (
            f" valid={trial.valid_score:.4f} [{trial.valid_ci_low or 0:.4f},{trial.valid_ci_high or 0:.4f}]"
        )
        if trial.valid_n:
            text += f" n={trial.valid_n}"
    return text


def render_trial_tree(
    trials: list[TrialRecord], base_model: str, baseline_score: float | None, best_trial_id: str | None
) -> str:
    """An indented tree rooted at the base model; trials whose parent is unknown hang off the root, marked."""
    by_id = {trial.trial_id: trial for trial in trials}
    children: dict[str | None, list[TrialRecord]] = {}
    for trial in sorted(trials, key=lambda t: t.index):
        parent = by_id.get(trial.proposal.init_from or "")
        # only an earlier trial can be a parent: this keeps the tree acyclic whatever init_from says
        parent_id = parent.trial_id if parent is not None and parent.index < trial.index else None
        children.setdefault(parent_id, []).append(trial)

    baseline = "not scored" if baseline_score is None else f"{baseline_score:.4f}"
    lines = [f"base model {base_model} (baseline score {baseline})"]
    if not trials:
        lines.append("└── (no trials yet)")
        return "\n".join(lines)

    def walk(parent_id: str | None, prefix: str) -> None:
        kids = children.get(parent_id, [])
        for position, trial in enumerate(kids):
            last = position == len(kids) - 1
            branch, stem = ("└── ", "    ") if last else ("├── ", "│   ")
            parent = by_id.get(parent_id) if parent_id else None
            parent_score = parent.score if parent else baseline_score
            head = f"{trial.trial_id} [{trial.status}] {_score_text(trial, parent_score)}"
            if trial.trial_id == best_trial_id:
                head += " BEST"
            if trial.duration_s:
                head += f" {trial.duration_s:.0f}s"
            lines.append(prefix + branch + head)
            detail = prefix + stem + "    "
            orphan = trial.proposal.init_from is not None and parent is None
            if orphan:
                lines.append(detail + f"(init_from {trial.proposal.init_from} is not a known trial)")
            changes = proposal_changes(trial.proposal, parent.proposal if parent else None)
            operator = f"operator: {trial.proposal.operator}; "
            lines.append(detail + operator + ("changed: " if parent else "set: ") + changes)
            lines.append(detail + "hypothesis: " + _clip(trial.proposal.hypothesis))
            if trial.train_metrics:
                shown = sorted(trial.train_metrics.items())[:MAX_METRICS]
                lines.append(detail + "train metrics: " + ", ".join(f"{k}={v:.4g}" for k, v in shown))
            if trial.error:
                lines.append(detail + "error: " + _clip(trial.error, 300))
            walk(trial.trial_id, prefix + stem)

    walk(None, "")
    return "\n".join(lines)
