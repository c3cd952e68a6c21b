"""The score rule: which baseline and best a run is reported by, and what its improvement is.

One consistent pair, never a mix: when the run splits its hidden test set, the best submission is chosen on the
public part and reported on the private part it never saw (private baseline against private best); without the
split, the public pair (which is then the whole test set). With no unflagged submission scored, the run's model is
its base model: best = baseline and improvement 0.0 (as the grader's public `best_score` and `improvement` always
said). The grader's finalize reports these figures (`reported`); every reader of a run's numbers takes them from
there, and the loop's live figures use the same rule on the public scores it sees.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel

ScoredOn = Literal["private", "public"]


class RunFigures(BaseModel):
    """A run's reported baseline, best and improvement, and which part of the test set they were scored on."""

    scored_on: ScoredOn
    baseline: float
    best: float
    improvement: float


def run_figures(baseline: float, best: float | None, scored_on: ScoredOn = "public") -> RunFigures:
    """The figures of a run whose best submission scored `best` (None: no unflagged submission was scored)."""
    top = baseline if best is None else best
    return RunFigures(scored_on=scored_on, baseline=baseline, best=top, improvement=top - baseline)
