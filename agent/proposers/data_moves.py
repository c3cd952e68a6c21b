"""What a careful researcher checks in the data before training on it, and the moves that follow.

The built-in policies read the run's public train split (the workspace's data/train.jsonl, which the host wrote;
never the hidden test set) once, against the task's own exact checker where it has one (`tasks.base.Verifier`), and
offer a supervised recipe the train-row choices the data call for (`trainers.config.TrainRowChoices`):

- `filter_by_verifier`: a share of the labelled answers is wrong by the verifier (demonstrations with slips);
- `answer_format: final_number`: most answers are not the bare answer the task scores, yet their final number is right
  (worked solutions, sentences);
- prompts without an answer: recipes that learn from prompts alone (`rft`, RL) come before supervised ones.

A data move is a hypothesis like any other: the search tries it and keeps it only if it scores.
"""

from __future__ import annotations

import functools
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

SAMPLE_ROWS = 20_000  # train rows read to judge the data (the whole split of the built-in tasks)
WRONG_SHARE = 0.05  # labelled answers the verifier rejects above this share: offer the filter
VERBOSE_SHARE = (
    0.5  # labelled answers that are not their own final number above this share: offer the reformat
)
UNLABELLED_SHARE = 0.5  # prompts without an answer above this share: prompt-only recipes first
ROW_MOVE_RECIPES = ("sft", "grpo", "opo", "rft")  # the recipes whose configs take TrainRowChoices


@dataclass(frozen=True)
class DataMove:
    """Train-row choices to add to a supervised recipe's hyperparameters, and what in the data calls for them."""

    fields: dict[str, Any]
    why: str


@dataclass(frozen=True)
class DataReport:
    """What the train rows looked like, and the moves they call for."""

    moves: tuple[DataMove, ...] = ()
    unlabelled_share: float = 0.0
    notes: tuple[str, ...] = field(default_factory=tuple)

    @property
    def prompts_only(self) -> bool:
        return self.unlabelled_share > UNLABELLED_SHARE


def data_report(workspace: str | None, benchmark: str) -> DataReport:
    """The report for a run's workspace (empty when there is none to read)."""
    if not workspace:
        return DataReport()
    return _report(str(Path(workspace) / "data" / "train.jsonl"), benchmark)


@functools.lru_cache(maxsize=16)
def _report(train_file: str, benchmark: str) -> DataReport:
    from tasks import get_benchmark
    from tasks.answers import extract_number
    from tasks.base import Verifier

    try:
        with open(train_file, encoding="utf-8") as handle:
            rows = [
                json.loads(line) for _, line in zip(range(SAMPLE_ROWS), handle, strict=False) if line.strip()
            ]
        task = get_benchmark(benchmark)
    except (OSError, ValueError, KeyError):
        return DataReport()
    rows = [r for r in rows if isinstance(r, dict) and isinstance(r.get("prompt"), str)]
    labelled = [r for r in rows if isinstance(r.get("answer"), str) and r["answer"].strip()]
    unlabelled = 1.0 - len(labelled) / len(rows) if rows else 0.0
    moves: list[DataMove] = []
    notes: list[str] = []
    if labelled and isinstance(task, Verifier):
        finals = [extract_number(r["answer"]) for r in labelled]
        verbose = sum(
            1 for r, n in zip(labelled, finals, strict=True) if n is not None and n != r["answer"].strip()
        )
        if verbose / len(labelled) > VERBOSE_SHARE:
            moves.append(
                DataMove(
                    {"answer_format": "final_number"},
                    f"{verbose} of {len(labelled)} answers read are not the bare answer the task scores: train on "
                    "the final number they state",
                )
            )
        wrong = sum(1 for r, n in zip(labelled, finals, strict=True) if not task.verify(n or "", r["prompt"]))
        if wrong / len(labelled) > WRONG_SHARE:
            moves.append(
                DataMove(
                    {"filter_by_verifier": True},
                    f"{wrong} of {len(labelled)} answers read are wrong by the task's verifier: train on the rows "
                    "it accepts",
                )
            )
    if unlabelled > UNLABELLED_SHARE:
        notes.append(f"{unlabelled:.0%} of the train rows read have no answer: learn from the prompts")
    return DataReport(tuple(moves), unlabelled, tuple(notes))


def takes_row_moves(recipe: str) -> bool:
    return recipe in ROW_MOVE_RECIPES


def carried(hyperparameters: dict[str, Any], recipe: str) -> dict[str, Any]:
    """The train-row choices a continuation keeps from its parent (a filtered line stays filtered)."""
    if not takes_row_moves(recipe):
        return {}
    return {k: hyperparameters[k] for k in ("filter_by_verifier", "answer_format") if k in hyperparameters}
