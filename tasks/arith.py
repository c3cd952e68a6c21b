"""`arith`: procedurally generated two-operand arithmetic; train and valid from fixed public seeds.

Small enough that a 0.3M-parameter model learns it on a laptop CPU in minutes, hard enough that a briefly trained one
gets only a fraction right: the benchmark rlloop's demo and tests run on. One problem in `TEST_MODULUS` (by a hash
of its prompt) is reserved for test candidates and never appears in train or valid; the grader draws its hidden
test split from that reserve with a secret seed, so memorising train cannot leak test answers and no trial can
regenerate the test split.
"""

from __future__ import annotations

import random
import re
from functools import lru_cache
from typing import Any

from tasks.answers import first_number, numbers_match
from tasks.base import Sample, Split, draw_public_splits, public_split, reserved_for_test

SPLIT_SIZES: dict[str, int] = {"test": 1000, "valid": 300, "train": 12000}
SPLIT_SEEDS: dict[str, int] = {"valid": 2_000_003, "train": 3_000_017}
OPERATORS = ("+", "-")
MAX_OPERAND = 99
TEST_MODULUS = 7  # ~2,150 of the 15,050 distinct problems are test candidates
_PROBLEM = re.compile(r"(\d+)([+-])(\d+)=")


def _problem(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    op = rng.choice(OPERATORS)
    if op == "-" and b > a:
        a, b = b, a
    result = a + b if op == "+" else a - b
    return f"{a}{op}{b}=", str(result)


def problem_space() -> list[tuple[str, str]]:
    """Every distinct problem, in a fixed order: (prompt, answer)."""
    plus = [(f"{a}+{b}=", str(a + b)) for a in range(MAX_OPERAND + 1) for b in range(MAX_OPERAND + 1)]
    minus = [(f"{a}-{b}=", str(a - b)) for a in range(MAX_OPERAND + 1) for b in range(a + 1)]
    return plus + minus


def result_of(prompt: str) -> str | None:
    """The answer to an arith prompt ("37+58=" -> "95") computed from the prompt itself; None for any other text."""
    match = _PROBLEM.fullmatch(prompt)
    if match is None:
        return None
    a, op, b = int(match.group(1)), match.group(2), int(match.group(3))
    return str(a + b if op == "+" else a - b)


def is_test_candidate(prompt: str) -> bool:
    return reserved_for_test("arith", prompt, TEST_MODULUS)


@lru_cache(maxsize=1)
def _splits() -> dict[str, list[Sample]]:
    return draw_public_splits(
        SPLIT_SEEDS,
        SPLIT_SIZES,
        _problem,
        key=lambda problem: problem[0],
        reserved=lambda problem: is_test_candidate(problem[0]),
        sample=lambda split, index, problem: Sample(
            id=f"arith-{split}-{index}", prompt=problem[0], answer=problem[1]
        ),
    )


class ArithBenchmark:
    """Two-digit addition and subtraction; the answer is the number right after '='."""

    name = "arith"
    description = (
        "Two-operand integer arithmetic: prompts like '37+58=' or '72-19=', operands 0-99, non-negative results. "
        "The model must write the result right after '=' and stop. Score: exact match of the first number written."
    )
    max_new_tokens = 6
    stop = ["\n", " "]

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        return list(_splits()[split])

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """A generated dataset's own form: `question` (the prompt) and `answer` (the result)."""
        return [{"question": s.prompt, "answer": s.answer} for s in self.load(split)]

    def score(self, completion: str, sample: Sample) -> float:
        return 1.0 if numbers_match(first_number(completion), sample.answer) else 0.0

    def verify(self, completion: str, prompt: str) -> float:
        """The score against the result computed from the prompt (`tasks.base.Verifier`): exact without an answer."""
        result = result_of(prompt)
        return 1.0 if result is not None and numbers_match(first_number(completion), result) else 0.0
