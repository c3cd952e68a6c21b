"""Workspace JSONL (`{"id","prompt","answer"}` per line) into Hugging Face datasets, in the shapes TRL expects."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from datasets import Dataset


class DataFileError(ValueError):
    """A training file that cannot be used; the message names the file and line and says what to fix."""


def read_jsonl(path: Path, *, limit: int | None = None) -> list[dict[str, Any]]:
    """Rows of a workspace JSONL file; each must be an object with string `prompt` and `answer`."""
    if not path.is_file():
        raise DataFileError(f"train_file {path} does not exist; use the workspace's data/train.jsonl")
    rows: list[dict[str, Any]] = []
    with path.open(encoding="utf-8") as fh:
        for number, line in enumerate(fh, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as exc:
                raise DataFileError(
                    f"{path}:{number}: not valid JSON ({exc.msg}); one object per line"
                ) from None
            if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "answer" not in row:
                raise DataFileError(f'{path}:{number}: each line needs string "prompt" and "answer" fields')
            rows.append(
                {"id": str(row.get("id", number)), "prompt": row["prompt"], "answer": str(row["answer"])}
            )
            if limit is not None and len(rows) >= limit:
                break
    if not rows:
        raise DataFileError(f"{path} has no samples; it must hold one JSON object per line")
    return rows


def prompt_completion_dataset(path: Path, *, max_samples: int | None = None) -> Dataset:
    """For SFT: `prompt` and `completion` (the answer) columns, so the loss covers the completion only."""
    rows = read_jsonl(path, limit=max_samples)
    return Dataset.from_dict(
        {"prompt": [r["prompt"] for r in rows], "completion": [r["answer"] for r in rows]}
    )


def prompt_answer_dataset(path: Path, *, max_samples: int | None = None) -> Dataset:
    """For RL: `prompt` plus the reference `answer`, which TRL passes to reward functions as a keyword."""
    rows = read_jsonl(path, limit=max_samples)
    return Dataset.from_dict(
        {
            "prompt": [r["prompt"] for r in rows],
            "answer": [r["answer"] for r in rows],
            "id": [r["id"] for r in rows],
        }
    )
