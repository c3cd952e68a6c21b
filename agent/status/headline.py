"""What a run achieved, in one sentence with both halves of the hidden test set named: the same words at the end of
`rlloop run`, in `rlloop runs`, on the service's run list and at the top of the run page.

    public half: best 0.714 (t04), +62.4 points over the baseline 0.090 in 3 submissions; private half: 0.706 vs
    0.102 (+60.4 points)

The public half is what the run chose by (every live score, `best_score` in the checkpoint and MLflow); the private
half is scored on the part the run never saw, revealed when it ends (results.csv's baseline and best_score when the
test set is split: `scored_on` says which). Built from the host's records only: the loop's checkpoint and summary.json.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, Field

ENDED = ("finished", "terminated", "failed")


class Headline(BaseModel):
    """A run's figures on both halves, and where its best checkpoint is; `text` says it in words."""

    public_baseline: float | None = Field(default=None, description="The base model on the public half.")
    public_best: float | None = Field(
        default=None, description="The best unflagged submission on the public half."
    )
    best_trial_id: str | None = None
    submissions: int = 0
    private_baseline: float | None = Field(
        default=None, description="The base model on the private half (once the run ended)."
    )
    private_best: float | None = Field(
        default=None,
        description="The checkpoint chosen on the public half, scored on the private half (once the run ended).",
    )
    ended: bool = Field(default=False, description="The run ended: the grader revealed the private half.")
    split: bool = Field(default=True, description="The hidden test set has a private half.")
    best_checkpoint: str | None = Field(default=None, description="Where the best checkpoint is (a folder).")
    checkpoint_problem: str | None = Field(
        default=None, description="Why that folder is not what the grader scored, if it is not."
    )
    text: str = ""


def _points(best: float, baseline: float) -> str:
    return f"{100 * (best - baseline):+.1f} points"


def headline_text(h: Headline) -> str:
    """The sentence (see the module's docstring); the checkpoint's place is `checkpoint_text`."""
    if h.public_baseline is None:
        return "no baseline yet"
    half = "public half: " if h.split else ""
    so_far = "" if h.ended else " so far"
    if h.public_best is None:
        none = "no submission scored" if h.submissions == 0 else "no unflagged submission scored"
        public = f"{half}{none}{so_far}; baseline {h.public_baseline:.3f}"
    else:
        who = f" ({h.best_trial_id})" if h.best_trial_id else ""
        count = f"{h.submissions} submission{'s' if h.submissions != 1 else ''}"
        public = (
            f"{half}best{so_far} {h.public_best:.3f}{who}, {_points(h.public_best, h.public_baseline)} over the "
            f"baseline {h.public_baseline:.3f} in {count}"
        )
    if not h.split:
        return f"{public} (the whole test set: no private half)"
    if h.private_baseline is None:
        return f"{public}; private half: {'not read from the grader' if h.ended else 'revealed when the run ends'}"
    if h.private_best is None:
        return f"{public}; private half: baseline {h.private_baseline:.3f}"
    return (
        f"{public}; private half: {h.private_best:.3f} vs {h.private_baseline:.3f} "
        f"({_points(h.private_best, h.private_baseline)})"
    )


def checkpoint_text(h: Headline) -> str:
    """Where the best checkpoint is ("" when there is none)."""
    if not h.best_checkpoint:
        return ""
    if h.checkpoint_problem:
        return f"best checkpoint: {h.best_checkpoint} (not what the grader scored: {h.checkpoint_problem})"
    return f"best checkpoint: {h.best_checkpoint}"


def _number(value: Any) -> float | None:
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


def run_headline(state: Mapping[str, Any], summary: Mapping[str, Any]) -> Headline:
    """A run's headline from its checkpoint (`state`: the loop's live, public figures) and its summary.json (the
    grader's final figures, the best checkpoint); either may be empty (a run still starting, an external agent's)."""
    grader = summary.get("grader") if isinstance(summary.get("grader"), Mapping) else {}
    assert isinstance(grader, Mapping)
    ended = bool(grader.get("reported")) or summary.get("status") in ENDED
    public_baseline = _number(state.get("baseline_score"))
    public_best = _number(state.get("best_score"))
    if public_baseline is None:  # no loop checkpoint (an external agent): the grader's public figures
        public_baseline = _number(grader.get("baseline_score"))
        public_best = (
            _number(grader.get("best_score")) if grader.get("best_submission_id") is not None else None
        )
    submissions = state.get("submissions")
    if submissions is None:
        submissions = grader.get("total_submissions", summary.get("submissions", 0))
    split = grader.get("public_private_split")
    found = summary.get("best_checkpoint") if isinstance(summary.get("best_checkpoint"), Mapping) else None
    headline = Headline(
        public_baseline=public_baseline,
        public_best=public_best,
        best_trial_id=str(state.get("best_trial_id") or "") or None,
        submissions=int(_number(submissions) or 0),
        private_baseline=_number(grader.get("baseline_private_score")),
        private_best=(
            _number(grader.get("final_private_score"))
            if grader.get("best_submission_id") is not None
            else None
        ),
        ended=ended,
        split=True if split is None else bool(split),
        best_checkpoint=str(found["path"]) if found and found.get("path") else None,
        checkpoint_problem=(
            str(found.get("problem") or "not verified") if found and not found.get("verified") else None
        ),
    )
    headline.text = headline_text(headline)
    return headline
