"""Validate a recipe's inputs before any GPU time is spent: experience lists, system prompts and data roots.

Every problem is reported (not just the first), each with its file and, where it has one, its line, so a person
can fix a file in one pass. Warnings are what is likely but not certainly wrong (a system prompt that does not read
like its prompt type, an unfilled template marker, no validation split); `--strict` makes them problems. Nothing
here loads a model or a tokenizer.
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Concatenate, ParamSpec

from pydantic import BaseModel, Field

REQUIRED_FIELDS = ("prompt", "answer")
VERL_PARQUET_COLUMNS = ("data_source", "prompt", "reward_model")
MAX_SYSTEM_PROMPT_CHARS = 200_000
MIN_SYSTEM_PROMPT_CHARS = 20
# the system prompts OPCD distils, and words a prompt of that type is expected to use (any one will do)
PROMPT_TYPES: dict[str, tuple[str, ...]] = {
    "safety": ("safe", "harm", "refus", "danger", "ethic", "illegal"),
    "medmcqa": ("medic", "clinic", "patient", "diagnos", "health", "doctor"),
}
P = ParamSpec("P")
_UNFILLED = re.compile(r"\{\{[^}]*\}\}|<[A-Z][A-Z0-9_]*>|\bTODO\b|\bTBD\b")


class Problem(BaseModel):
    file: str
    line: int | None = None
    message: str

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.line is not None else self.file
        return f"{where}: {self.message}"


class Report(BaseModel):
    checked: list[str] = Field(default_factory=list)
    problems: list[Problem] = Field(default_factory=list)
    warnings: list[Problem] = Field(default_factory=list)  # problems only under --strict

    @property
    def ok(self) -> bool:
        return not self.problems


def _on_text(
    check: Callable[Concatenate[Path, str, P], list[Problem]],
) -> Callable[Concatenate[Path, P], list[Problem]]:
    """A check of a file's text, run on a path: a missing or non-UTF-8 file is the one problem reported."""

    @functools.wraps(check)
    def on_path(path: Path, /, *args: P.args, **kwargs: P.kwargs) -> list[Problem]:
        path = Path(path)
        if not path.is_file():
            return [Problem(file=str(path), message="does not exist (or is not a file)")]
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError as exc:
            return [Problem(file=str(path), message=f"is not UTF-8 text (byte {exc.start})")]
        return check(path, text, *args, **kwargs)

    return on_path


def _item_problem(value: object) -> str | None:
    if isinstance(value, dict):
        if set(value) - {"text", "source", "round", "score"}:
            extra = ", ".join(sorted(set(value) - {"text", "source", "round", "score"}))
            return f'unknown field(s) {extra}; an item is a string or {{"text": ...}}'
        value = value.get("text")
    if not isinstance(value, str):
        return "an experience item must be a string or an object with a string 'text'"
    if not value.strip():
        return "empty experience item"
    return None


@_on_text
def check_experience(path: Path, text: str) -> list[Problem]:
    """A .json list (or {"experience": [...]}) or a .jsonl file of non-empty, distinct items."""
    problems: list[Problem] = []
    located: list[tuple[object, int | None, str]] = []  # (item, line, label used in messages)
    if path.suffix == ".jsonl":
        for number, raw in enumerate(text.splitlines(), start=1):
            if not raw.strip():
                continue
            try:
                located.append((json.loads(raw), number, ""))
            except json.JSONDecodeError as exc:
                problems.append(Problem(file=str(path), line=number, message=f"not valid JSON ({exc.msg})"))
    elif path.suffix == ".json":
        try:
            data = json.loads(text)
        except json.JSONDecodeError as exc:
            return [Problem(file=str(path), line=exc.lineno, message=f"not valid JSON ({exc.msg})")]
        if isinstance(data, dict):
            if "experience" not in data:
                return [Problem(file=str(path), message="an object needs an 'experience' list")]
            data = data["experience"]
        if not isinstance(data, list):
            return [Problem(file=str(path), message='expected a list of items or {"experience": [...]}')]
        lines = text.splitlines()
        for index, value in enumerate(data):
            needle = json.dumps(value.get("text") if isinstance(value, dict) else value)
            found = next((n for n, row in enumerate(lines, start=1) if needle in row), None)
            located.append((value, found, f"item {index}: "))
    else:
        return [Problem(file=str(path), message="an experience list must be .json or .jsonl")]
    if not located and not problems:
        problems.append(Problem(file=str(path), message="no experience items"))
    seen: dict[str, int | None] = {}
    for value, where, label in located:
        issue = _item_problem(value)
        if issue:
            problems.append(Problem(file=str(path), line=where, message=label + issue))
            continue
        key = str(value.get("text") if isinstance(value, dict) else value).strip()
        if key in seen:
            problems.append(
                Problem(
                    file=str(path), line=where, message=f"{label}duplicate item (first at line {seen[key]})"
                )
            )
        seen.setdefault(key, where)
    return problems


@_on_text
def check_system_prompt(path: Path, text: str) -> list[Problem]:
    """Readable UTF-8 text, not empty, not absurdly long."""
    problems: list[Problem] = []
    if not text.strip():
        problems.append(Problem(file=str(path), message="system prompt is empty"))
    elif len(text) > MAX_SYSTEM_PROMPT_CHARS:
        problems.append(
            Problem(
                file=str(path),
                message=f"system prompt is {len(text)} characters (limit {MAX_SYSTEM_PROMPT_CHARS})",
            )
        )
    return problems


def system_prompt_warnings(path: Path, prompt_type: str | None = None) -> list[Problem]:
    """What is likely wrong with a readable system prompt: too short, unfilled template markers, or (with
    `prompt_type`) a text or file name that does not match the type."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError):
        return []  # check_system_prompt reports it
    if not text.strip():
        return []
    warnings = []
    if len(text.strip()) < MIN_SYSTEM_PROMPT_CHARS:
        warnings.append(
            Problem(file=str(path), message=f"system prompt is only {len(text.strip())} characters")
        )
    for number, line in enumerate(text.splitlines(), start=1):
        for marker in _UNFILLED.findall(line):
            warnings.append(
                Problem(file=str(path), line=number, message=f"unfilled template marker {marker}")
            )
    if prompt_type is not None:
        words = PROMPT_TYPES[prompt_type]
        if not any(w in text.lower() for w in words):
            warnings.append(
                Problem(
                    file=str(path),
                    message=f"prompt type {prompt_type!r}, but the text mentions none of: {', '.join(words)}",
                )
            )
        others = [t for t in PROMPT_TYPES if t != prompt_type and t in path.stem.lower()]
        if others:
            warnings.append(
                Problem(
                    file=str(path),
                    message=f"prompt type {prompt_type!r}, but the file is named for {others[0]}",
                )
            )
    return warnings


@_on_text
def check_jsonl(path: Path, text: str, required: Iterable[str] = REQUIRED_FIELDS) -> list[Problem]:
    """Every line a JSON object with non-empty string `required` fields; ids, when present, unique."""
    problems: list[Problem] = []
    needed = tuple(required)
    ids: dict[str, int] = {}
    rows = 0
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        rows += 1
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            problems.append(Problem(file=str(path), line=number, message=f"not valid JSON ({exc.msg})"))
            continue
        if not isinstance(row, dict):
            problems.append(Problem(file=str(path), line=number, message="expected a JSON object"))
            continue
        for field in needed:
            value = row.get(field)
            if field not in row:
                problems.append(Problem(file=str(path), line=number, message=f"missing field '{field}'"))
            elif not isinstance(value, str) or not value.strip():
                problems.append(
                    Problem(file=str(path), line=number, message=f"'{field}' must be a non-empty string")
                )
        if "id" in row:
            key = str(row["id"])
            if key in ids:
                problems.append(
                    Problem(file=str(path), line=number, message=f"duplicate id {key!r} (line {ids[key]})")
                )
            ids.setdefault(key, number)
    if rows == 0:
        problems.append(Problem(file=str(path), message="no rows"))
    return problems


def check_parquet(path: Path, columns: Iterable[str] = VERL_PARQUET_COLUMNS) -> list[Problem]:
    """verl's RL parquet: the columns its RLHF dataset reads (schema only; rows are not loaded)."""
    import pyarrow.parquet as pq

    try:
        schema = pq.read_schema(path)
    except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for unreadable files
        return [Problem(file=str(path), message=f"not a readable parquet file ({exc})")]
    missing = [c for c in columns if c not in schema.names]
    return (
        [Problem(file=str(path), message=f"missing column(s) {', '.join(missing)} (verl RL format)")]
        if missing
        else []
    )


def check_data_root(root: Path) -> list[Problem]:
    """A data root holds train.jsonl (required) and optionally valid.jsonl, experience files and verl parquet."""
    root = Path(root)
    if not root.is_dir():
        return [Problem(file=str(root), message="data root does not exist (or is not a folder)")]
    problems: list[Problem] = []
    if not (root / "train.jsonl").is_file() and not (root / "train.parquet").is_file():
        problems.append(
            Problem(
                file=str(root / "train.jsonl"),
                message="missing: a data root needs train.jsonl or train.parquet",
            )
        )
    for name in ("train.jsonl", "valid.jsonl"):
        if (root / name).is_file():
            problems += check_jsonl(root / name)
    for name in ("train.parquet", "valid.parquet"):
        if (root / name).is_file():
            problems += check_parquet(root / name)
    if (root / "test.jsonl").exists():
        problems.append(
            Problem(file=str(root / "test.jsonl"), message="hidden test labels must not be in a data root")
        )
    for name in ("experience.json", "experience.jsonl"):
        if (root / name).is_file():
            problems += check_experience(root / name)
    return problems


def data_root_warnings(root: Path) -> list[Problem]:
    """A root without a validation split: the plans' data.val_files would not exist."""
    root = Path(root)
    if not root.is_dir() or any((root / n).is_file() for n in ("valid.jsonl", "valid.parquet")):
        return []
    return [
        Problem(
            file=str(root / "valid.parquet"), message="no valid.jsonl or valid.parquet (validation split)"
        )
    ]


def check_inputs(
    experience: Iterable[Path] = (),
    system_prompts: Iterable[Path] = (),
    data_roots: Iterable[Path] = (),
    *,
    prompt_type: str | None = None,
) -> Report:
    """Check everything given; the report lists what was checked, every problem and every warning found."""
    if prompt_type is not None and prompt_type not in PROMPT_TYPES:
        raise ValueError(f"unknown prompt type {prompt_type!r}; choose one of {', '.join(PROMPT_TYPES)}")
    report = Report()
    for path in experience:
        report.checked.append(str(path))
        report.problems += check_experience(Path(path))
    for path in system_prompts:
        report.checked.append(str(path))
        report.problems += check_system_prompt(Path(path))
        report.warnings += system_prompt_warnings(Path(path), prompt_type)
    for path in data_roots:
        report.checked.append(str(path))
        report.problems += check_data_root(Path(path))
        report.warnings += data_root_warnings(Path(path))
    return report
