"""Answer extraction on realistic model outputs."""

from __future__ import annotations

import pytest

from grader.answers import extract_number, first_number, normalize_number, numbers_match


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("#### 18", "18"),
        ("She makes 9 * 2 = $18 every day.\n#### 18", "18"),
        ("The answer is $18.", "18"),
        ("The answer is: 18", "18"),
        ("A: 18", "18"),
        ("18.00", "18"),
        ("1,234", "1234"),
        ("The final answer is 1,234.50 dollars", "1234.5"),
        ("\\boxed{42}", "42"),
        ("It drops to -7 degrees, so the answer is -7.", "-7"),
        # chain of thought with several numbers: the marked answer wins, not the last number written
        ("16 - 3 - 4 = 9 eggs. 9 * 2 = 18. The answer is 18. (Checked with 3 other methods.)", "18"),
        ("First 3 + 4 = 7, then 7 * 5 = 35.\nSo 35 apples in 2 baskets", "2"),
        ("Step 1: 12 / 4 = 3\nStep 2: 3 + 10 = 13\n#### 13\nQuestion: next one has 99", "13"),
        ("no number here", None),
        ("She picks 3,4,5 in turn", "5"),
        ("#### 1,8", "1"),
        ("12,345,678 grains", "12345678"),
    ],
)
def test_extract_number(completion: str, expected: str | None) -> None:
    assert extract_number(completion) == expected


def test_normalize_and_match() -> None:
    assert normalize_number("$1,000.") == "1000"
    assert normalize_number("0.50") == "0.5"
    assert normalize_number("abc") is None
    assert numbers_match("18", "18.00") and numbers_match(extract_number("#### 1,234"), "1234")
    assert not numbers_match(None, "18") and not numbers_match("17", "18")


def test_first_number_for_short_answers() -> None:
    assert first_number("95\n12") == "95"
    assert first_number(" 7 is it") == "7"
    assert first_number("") is None
