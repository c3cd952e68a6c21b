"""Memory across runs (`--memory`): what worked and what broke, with scores, per benchmark and base model.

A run with memory on writes its lessons at its end (one per trial: recipe, hyperparameters, the scores it got, or
the error that broke it) to RLLOOP_HOME/memory/<benchmark>__<base model>.json, atomically, and the next run with
memory on on the same pair hands them to its proposer: the LLM reads them in its prompt, the built-in proposer may
start from the recipe that did best (`best_start`) and try first the change of learning rate that gained most
when a run trained on from its own checkpoints (`best_step`). Lessons hold only what the loop itself saw (workspace scores and
public grader scores), never hidden test data.
"""

from __future__ import annotations

import hashlib
import logging
import math
import re
import time
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from agent.core import TrialRecord
from tasks import once
from tasks.atomic import atomic_write_text

log = logging.getLogger(__name__)

MAX_LESSONS = 60  # the newest are kept; a prompt shows at most MAX_SHOWN of them
MAX_SHOWN = 12

Outcome = Literal["worked", "no gain", "broke"]


class Lesson(BaseModel):
    """One trial of an earlier run, as the next run should hear about it."""

    run_id: str
    trial_id: str
    outcome: Outcome
    recipe: str
    hyperparameters: dict[str, Any] = Field(default_factory=dict)
    init_from: str | None = None
    custom_code: bool = False
    score: float | None = None  # public grader score
    valid_score: float | None = None  # workspace valid split
    baseline: float | None = None
    gain: float | None = None  # over the baseline, on the score it was judged by
    error: str | None = None
    duration_s: float = 0.0
    at: float = Field(default_factory=time.time)


class Memory(BaseModel):
    benchmark: str
    base_model: str
    lessons: list[Lesson] = Field(default_factory=list)


def memory_file(home: Path, benchmark: str, base_model: str) -> Path:
    """One file per (benchmark, base model); a path-like model name gets a readable slug plus a short hash."""
    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", base_model).strip("-.")[-60:] or "model"
    if slug != base_model:
        slug += "-" + hashlib.sha256(base_model.encode()).hexdigest()[:8]
    bench = re.sub(r"[^A-Za-z0-9_.-]+", "-", benchmark)
    return home / "memory" / f"{bench}__{slug}.json"


def load(home: Path, benchmark: str, base_model: str) -> Memory:
    path = memory_file(home, benchmark, base_model)
    try:
        return Memory.model_validate_json(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        return Memory(benchmark=benchmark, base_model=base_model)
    except (OSError, ValidationError, ValueError) as exc:
        log.warning("memory file %s is unreadable (%s); starting it afresh", path, type(exc).__name__)
        return Memory(benchmark=benchmark, base_model=base_model)


def lesson_of(run_id: str, trial: TrialRecord, baseline: float | None) -> Lesson | None:
    """What a trial teaches; None for a trial that never ran (rejected, skipped, no proposal)."""
    if trial.status not in ("succeeded", "failed") or trial.proposal.recipe == "none":
        return None
    valid = getattr(trial, "valid_score", None)
    judged = trial.score if trial.score is not None else valid
    gain = None if judged is None or baseline is None else judged - baseline
    if trial.status == "failed":
        outcome: Outcome = "broke"
    else:
        outcome = "worked" if gain is not None and gain > 0 else "no gain"
    return Lesson(
        run_id=run_id,
        trial_id=trial.trial_id,
        outcome=outcome,
        recipe=trial.proposal.recipe,
        hyperparameters=trial.proposal.hyperparameters,
        init_from=trial.proposal.init_from,
        custom_code=bool(trial.proposal.train_py),
        score=trial.score,
        valid_score=valid,
        baseline=baseline,
        gain=gain,
        error=(trial.error or "")[:300] or None,
        duration_s=trial.duration_s,
    )


def remember_run(
    home: Path,
    benchmark: str,
    base_model: str,
    run_id: str,
    trials: list[TrialRecord],
    baseline: float | None,
) -> Path:
    """Add a finished run's lessons (replacing its own from an earlier attempt at the same run) and write the file.
    Read, changed and written under the file's lock, so runs finishing at once each keep their lessons."""
    path = memory_file(home, benchmark, base_model)
    with once.exclusive(once.lock_file(home, f"memory-{path.stem}")):
        memory = load(home, benchmark, base_model)
        new = [lesson for t in trials if (lesson := lesson_of(run_id, t, baseline)) is not None]
        kept = [lesson for lesson in memory.lessons if lesson.run_id != run_id]
        memory.lessons = (kept + new)[-MAX_LESSONS:]
        atomic_write_text(path, memory.model_dump_json(indent=1))
    return path


def _hp(lesson: Lesson) -> str:
    parts = [
        f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
        for k, v in sorted(lesson.hyperparameters.items())
    ]
    if lesson.custom_code:
        parts.append("custom train.py")
    if lesson.init_from:
        parts.append(f"from {lesson.init_from}")
    return ", ".join(parts) or "defaults"


def _scores(lesson: Lesson) -> str:
    bits = []
    if lesson.score is not None:
        bits.append(f"score {lesson.score:.3f}")
    if lesson.valid_score is not None:
        bits.append(f"valid {lesson.valid_score:.3f}")
    if lesson.gain is not None:
        bits.append(f"{lesson.gain:+.3f} vs baseline {lesson.baseline:.3f}")
    return ", ".join(bits) or "not scored"


def render(memory: Memory, limit: int = MAX_SHOWN) -> str | None:
    """The lessons as prompt text: the best trials first, then what broke, then the rest (newest first)."""
    if not memory.lessons:
        return None
    worked = sorted((x for x in memory.lessons if x.outcome == "worked"), key=lambda x: -(x.gain or 0.0))
    broke = [x for x in reversed(memory.lessons) if x.outcome == "broke"]
    flat = [x for x in reversed(memory.lessons) if x.outcome == "no gain"]
    runs = len({x.run_id for x in memory.lessons})
    lines = [
        f"{len(memory.lessons)} trials over {runs} earlier run(s) of {memory.benchmark} on {memory.base_model}:"
    ]
    for lesson in (worked[:6] + broke[:3] + flat)[:limit]:
        line = f"- {lesson.outcome}: {lesson.recipe} ({_hp(lesson)}) -> {_scores(lesson)}"
        if lesson.outcome == "broke" and lesson.error:
            line += f"; error: {lesson.error[:160]}"
        lines.append(line + f" [{lesson.run_id}/{lesson.trial_id}, {lesson.duration_s:.0f}s]")
    return "\n".join(lines)


def lessons_text(home: Path, benchmark: str, base_model: str) -> str | None:
    """What the next run's proposer is told (None: nothing remembered yet)."""
    return render(load(home, benchmark, base_model))


def best_start(home: Path, benchmark: str, base_model: str) -> tuple[str, dict[str, Any]] | None:
    """The recipe and hyperparameters of the best remembered trial that started from the base model, if any."""
    roots = [
        x for x in load(home, benchmark, base_model).lessons if x.outcome == "worked" and not x.init_from
    ]
    roots = [x for x in roots if not x.custom_code]
    if not roots:
        return None
    best = max(roots, key=lambda x: x.gain or 0.0)
    return best.recipe, dict(best.hyperparameters)


STEP_FACTORS = (
    1.0,
    0.7,
    2.0,
    0.3,
)  # the tree's own rate steps (agent.proposers.tree): keep, anneal, larger, smaller


def best_step(home: Path, benchmark: str, base_model: str) -> float | None:
    """The learning-rate step (child's rate / parent's, one of STEP_FACTORS) that gained most on average when an
    earlier run trained a recipe on from its own checkpoint, by the workspace valid score; None when no step gained.

    Why: on a short budget, whether a line that climbs should keep its rate or anneal is what decides where it ends,
    and a search that starts afresh spends a trial to learn it again."""
    gains: dict[float, list[float]] = {}
    lessons = load(home, benchmark, base_model).lessons
    by_trial = {(x.run_id, x.trial_id): x for x in lessons}
    for child in lessons:
        parent = by_trial.get((child.run_id, child.init_from or ""))
        if parent is None or parent.recipe != child.recipe or child.outcome == "broke":
            continue
        child_lr, parent_lr = (
            child.hyperparameters.get("learning_rate"),
            parent.hyperparameters.get("learning_rate"),
        )
        child_value = child.valid_score if child.valid_score is not None else child.score
        parent_value = parent.valid_score if parent.valid_score is not None else parent.score
        if not child_lr or not parent_lr or child_value is None or parent_value is None:
            continue
        ratio = float(child_lr) / float(parent_lr)
        factor = min(STEP_FACTORS, key=lambda f: abs(math.log(ratio / f)))
        # one of the tree's own steps, not a draft's rate that happens to differ from its parent's
        if abs(math.log(ratio / factor)) < 0.05:
            gains.setdefault(factor, []).append(child_value - parent_value)
    if not gains:
        return None
    factor, mean = max(((f, sum(g) / len(g)) for f, g in gains.items()), key=lambda fg: fg[1])
    return factor if mean > 0 else None
