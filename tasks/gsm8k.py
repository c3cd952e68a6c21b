"""`gsm8k`: grade-school math word problems, scored by exact match of the final number.

Data comes from a local JSONL folder (`RLLOOP_GSM8K_DIR`, else `../shared/data/gsm8k` beside the repository or the
working directory) with `question` / `answer` lines, or from the Hugging Face hub via `datasets` when online.
`valid` is carved out of the official train file with a fixed seed. `test` is the official test file, which only the
grader reads (grader/benchmarks/gsm8k.py); this module refuses it. Few-shot exemplars always come from `train`. The calculator annotations `<<16-3=13>>` are removed from
reference solutions.
"""

from __future__ import annotations

import os
import random
import re
from functools import lru_cache
from pathlib import Path
from typing import Any

from tasks.answers import extract_number, normalize_number, numbers_match
from tasks.base import Sample, Split, public_split
from tasks.jsonl import json_lines

VALID_SIZE = 500
VALID_SEED = 20_240_607
_CALC = re.compile(r"<<[^>]*>>")
_REPO_ROOT = Path(__file__).resolve().parents[1]


class GSM8KDataError(RuntimeError):
    """The dataset cannot be found or read; the message says where the grader looked and what to do."""


def data_dir_candidates() -> list[Path]:
    """Where the local copy may be, in order of preference."""
    env = os.environ.get("RLLOOP_GSM8K_DIR")
    if env:
        return [Path(env)]
    return [_REPO_ROOT.parent / "shared" / "data" / "gsm8k", Path.cwd().parent / "shared" / "data" / "gsm8k"]


def _read_jsonl(path: Path) -> list[dict[str, str]]:
    rows: list[dict[str, str]] = []
    for number, row in json_lines(
        path,
        lambda number, _: GSM8KDataError(
            f"{path}:{number} is not valid JSON; restore the file from the source"
        ),
    ):
        if "question" not in row or "answer" not in row:
            raise GSM8KDataError(f"{path}:{number} lacks 'question' or 'answer'")
        rows.append({"question": str(row["question"]), "answer": str(row["answer"])})
    return rows


def _load_from_hub(split: str) -> list[dict[str, str]]:
    try:
        from datasets import load_dataset

        data = load_dataset("openai/gsm8k", "main", split=split)
    except Exception as exc:  # noqa: BLE001 - offline or hub errors all mean "no data here"
        looked = ", ".join(str(p) for p in data_dir_candidates())
        raise GSM8KDataError(
            f"GSM8K not found locally (looked in {looked}) and the hub is unreachable ({type(exc).__name__}); "
            f"set RLLOOP_GSM8K_DIR to a folder with {split}.jsonl"
        ) from None
    return [{"question": r["question"], "answer": r["answer"]} for r in data]


@lru_cache(maxsize=4)
def read_rows(data_dir: str | None, split: str) -> list[dict[str, str]]:
    """One official file's rows ("train" here; the grader alone asks for "test"), local folder first."""
    if data_dir is None:
        return _load_from_hub(split)
    return _read_jsonl(Path(data_dir) / f"{split}.jsonl")


def find_data_dir(split: str = "train") -> Path | None:
    for candidate in data_dir_candidates():
        if (candidate / f"{split}.jsonl").is_file():
            return candidate
    return None


def solution_text(raw_answer: str) -> str:
    """The reference reasoning without calculator annotations, ending in 'The answer is N.'."""
    body, _, final = raw_answer.rpartition("####")
    return f"{_CALC.sub('', body).strip()}\nThe answer is {final.strip()}."


def make_sample(split: str, index: int, row: dict[str, str]) -> Sample:
    final = row["answer"].rpartition("####")[2].strip()
    return Sample(
        id=f"gsm8k-{split}-{index}",
        prompt=f"Question: {row['question'].strip()}\nAnswer:",
        answer=normalize_number(final) or final,
        meta={"question": row["question"].strip(), "solution": solution_text(row["answer"])},
    )


class GSM8KBenchmark:
    """GSM8K with zero-shot ("default", "cot") and few-shot (EvalConfig.few_shot) chain-of-thought prompts."""

    name = "gsm8k"
    description = (
        "GSM8K grade-school math word problems (test: 1,319). The model reasons step by step and ends with "
        "'The answer is N.' (or '#### N'). Score: exact match of the final number, commas and '$' ignored."
    )
    max_new_tokens = 256
    stop = ["\nQuestion:", "\n\n\n"]
    prompt_formats = ["default", "cot"]

    def __init__(self, data_dir: Path | None = None) -> None:
        self._data_dir = data_dir

    def _rows(self, split: str) -> list[dict[str, str]]:
        folder = self._data_dir or find_data_dir(split)
        return read_rows(str(folder) if folder else None, split)

    def _chosen(self, split: Split) -> tuple[list[dict[str, str]], list[int]]:
        """The official train file's rows and the indices of `split` among them (valid: a seeded 500)."""
        public_split(self.name, split)
        train = self._rows("train")
        indices = list(range(len(train)))
        random.Random(VALID_SEED).shuffle(indices)
        valid = set(indices[:VALID_SIZE])
        chosen = sorted(valid) if split == "valid" else [i for i in range(len(train)) if i not in valid]
        return train, chosen

    def load(self, split: Split) -> list[Sample]:
        train, chosen = self._chosen(split)
        return [make_sample("train", i, train[i]) for i in chosen]

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """The official rows as they are (`question`, `answer` with the full solution and `#### N`)."""
        train, chosen = self._chosen(split)
        return [dict(train[i]) for i in chosen]

    def format_prompt(self, sample: Sample, prompt_format: str, exemplars: list[Sample]) -> str:
        cue = " Let's think step by step." if prompt_format == "cot" else ""
        shots = "".join(f"{ex.prompt} {ex.meta.get('solution', ex.answer)}\n\n" for ex in exemplars)
        return f"{shots}{sample.prompt}{cue}"

    def score(self, completion: str, sample: Sample) -> float:
        return 1.0 if numbers_match(extract_number(completion), sample.answer) else 0.0
