"""Experience lists and system prompts: the context OPCD, coach and OEL distil into a model's weights.

An experience list is a JSON file, either a list of strings or `{"experience": [...]}`, or a JSONL file with one
`{"text": ...}` (or a bare JSON string) per line. Any other file is a system prompt, used verbatim.
`render_context` turns either into the text placed before a prompt for the teacher.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

from tasks.atomic import atomic_write_json
from trainers.data import DataFileError

EXPERIENCE_HEADER = "Experience:"


class ContextError(DataFileError):
    """A context file that cannot be used; the message names the file (and line) and what to fix.

    A DataFileError, so `python -m trainers` reports it as bad input (exit 2, one line)."""


def _item(value: object, where: str) -> str:
    if isinstance(value, dict):
        value = value.get("text")
    if not isinstance(value, str) or not value.strip():
        raise ContextError(f'{where}: each experience item must be a non-empty string or {{"text": "..."}}')
    return value.strip()


def read_experience(path: Path) -> list[str]:
    """Items of a .json or .jsonl experience list."""
    path = Path(path)
    if not path.is_file():
        raise ContextError(f"{path}: no such experience file")
    if path.suffix == ".jsonl":
        items = []
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
            if not line.strip():
                continue
            try:
                items.append(_item(json.loads(line), f"{path}:{number}"))
            except json.JSONDecodeError as exc:
                raise ContextError(f"{path}:{number}: not valid JSON ({exc.msg})") from exc
        return items
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except json.JSONDecodeError as exc:
        raise ContextError(f"{path}:{exc.lineno}: not valid JSON ({exc.msg})") from exc
    if isinstance(data, dict):
        data = data.get("experience")
    if not isinstance(data, list):
        raise ContextError(f'{path}: expected a JSON list of strings or {{"experience": [...]}}')
    return [_item(v, f"{path}: item {i}") for i, v in enumerate(data)]


def is_experience_file(path: Path) -> bool:
    return Path(path).suffix in {".json", ".jsonl"}


def render_context(system_prompt: str | None = None, experience: Sequence[str] = ()) -> str:
    """The teacher-only prefix: system prompt, then the experience items, one per line; ends with a newline."""
    parts: list[str] = []
    if system_prompt and system_prompt.strip():
        parts.append(system_prompt.strip())
    if experience:
        parts.append("\n".join([EXPERIENCE_HEADER, *(f"- {item}" for item in experience)]))
    return "\n".join(parts) + "\n" if parts else ""


def load_context(context: str | None, context_file: Path | None) -> str:
    """The rendered context from inline text and/or a file (experience list or system prompt)."""
    system_prompt = context
    experience: list[str] = []
    if context_file is not None:
        path = Path(context_file)
        if is_experience_file(path):
            experience = read_experience(path)
        elif not path.is_file():
            raise ContextError(f"{path}: no such system-prompt file")
        else:
            text = path.read_text(encoding="utf-8")
            system_prompt = "\n".join(p for p in (context, text) if p and p.strip())
    rendered = render_context(system_prompt, experience)
    if not rendered:
        raise ContextError(
            "no context to distil: set `context` (text) or `context_file` (experience list or prompt)"
        )
    return rendered


def write_experience(path: Path, items: Sequence[str]) -> Path:
    """Write `{"experience": [...]}` atomically."""
    return atomic_write_json(path, {"experience": list(items)})
