"""Answer extraction: find the final number a model wrote, however it wrote it.

Models write "#### 18", "The answer is $18.", "A: 18", "18.00" or "1,234"; all of these must match the reference.
One implementation (in `tasks`, which the trainer image ships) serves the grader's scorer and the trainers' reward
functions, so training and grading agree.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from decimal import Decimal, InvalidOperation

# Commas only as thousands separators ("1,234"), so "1,8" or a list "3,4,5" are not read as one number.
_NUMBER = r"-?\$?\s?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?"
_MARKERS = [
    re.compile(r"####\s*(" + _NUMBER + ")"),
    re.compile(
        r"(?:final answer|the answer is|answer:)\s*(?:is\s*)?[:=]?\s*(" + _NUMBER + ")", re.IGNORECASE
    ),
    re.compile(r"\\boxed\{\s*(" + _NUMBER + r")\s*\}"),
    re.compile(r"(?:^|\n)\s*A:\s*(" + _NUMBER + ")"),
]
_ANY_NUMBER = re.compile(_NUMBER)


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The completion up to (not including) the earliest stop string: how the grader cuts a completion before
    scoring it, and so how trainer rewards and quick evals must cut it too."""
    cut = len(text)
    for s in stop:
        at = text.find(s) if s else -1
        if at != -1:
            cut = min(cut, at)
    return text[:cut]


def normalize_number(text: str) -> str | None:
    """Canonical form of a number ("1,234.00" -> "1234", "$18." -> "18"); None when it is not a number."""
    cleaned = text.replace(",", "").replace("$", "").replace(" ", "").rstrip(".")
    try:
        value = Decimal(cleaned)
    except InvalidOperation:
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def extract_number(completion: str) -> str | None:
    """The answer a completion commits to: a marked answer if there is one, else the last number written."""
    for pattern in _MARKERS:
        found = pattern.findall(completion)
        if found:
            return normalize_number(found[-1])
    numbers = _ANY_NUMBER.findall(completion)
    return normalize_number(numbers[-1]) if numbers else None


def first_number(completion: str) -> str | None:
    """The first number of a completion: for short-answer formats where the model should answer at once."""
    match = _ANY_NUMBER.search(completion)
    return normalize_number(match.group(0)) if match else None


def numbers_match(predicted: str | None, reference: str) -> bool:
    """Exact match after normalisation (so "18.00" equals "18")."""
    if predicted is None:
        return False
    return predicted == normalize_number(reference)
