"""A checkpoint's wrong answers grouped by kind (empty, extra text, wrong format, wrong number): what the
`validation_results` tool shows the driver model, so it reads the failures a trial made, not a list of them."""

from __future__ import annotations

import collections
import re
from collections.abc import Iterable
from typing import Any


def answer_pattern(text: str) -> str:
    """A coarse shape of an answer: digits become 9, letters a, so '123' and '456' cluster together."""
    shape = re.sub(r"[A-Za-z]+", "a", re.sub(r"\d+", "9", text.strip()))
    return shape[:40] or "(empty)"


def _error_kind(expected: str, got: str) -> str:
    got, expected = got.strip(), expected.strip()
    if not got:
        return "empty answer"
    if expected and re.search(rf"(?<![\w.]){re.escape(expected)}(?![\w.])", got) and got != expected:
        return "right answer with extra text"
    if answer_pattern(got) != answer_pattern(expected):
        return "wrong format"
    number = re.compile(r"^-?\d+(\.\d+)?$")
    if number.match(got) and number.match(expected):
        return "wrong number (off by <=10%)" if _close(got, expected) else "wrong number"
    return "wrong value, right format"


def _close(got: str, expected: str) -> bool:
    a, b = float(got), float(expected)
    return abs(a - b) <= 0.1 * max(1.0, abs(b))


def failure_clusters(samples: Iterable[dict[str, Any]]) -> list[tuple[str, int, list[dict[str, Any]]]]:
    """Wrong samples grouped by error kind (empty, extra text, wrong format, wrong number...), biggest first."""
    groups: dict[str, list[dict[str, Any]]] = collections.defaultdict(list)
    for sample in samples:
        if not sample.get("correct"):
            groups[_error_kind(str(sample.get("expected", "")), str(sample.get("got", "")))].append(sample)
    return sorted(((k, len(v), v) for k, v in groups.items()), key=lambda item: -item[1])
