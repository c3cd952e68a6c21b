"""`arith`'s hidden test split: drawn with the run's secret seed from the problems `tasks.arith` reserves for test.

Everything else about arith (prompts, scoring, train/valid) is public, in `tasks.arith`.
"""

from __future__ import annotations

import random
from functools import lru_cache

from grader.benchmarks.secret import DEFAULT_TEST_SEED
from tasks.arith import (
    MAX_OPERAND,
    OPERATORS,
    SPLIT_SEEDS,
    SPLIT_SIZES,
    TEST_MODULUS,
    is_test_candidate,
    problem_space,
)
from tasks.arith import ArithBenchmark as PublicArithBenchmark
from tasks.base import Sample, Split

__all__ = [
    "MAX_OPERAND",
    "OPERATORS",
    "SPLIT_SEEDS",
    "SPLIT_SIZES",
    "TEST_MODULUS",
]  # the public space, re-exported
__all__ += ["ArithBenchmark", "test_split"]


@lru_cache(maxsize=8)
def test_split(seed: int) -> tuple[Sample, ...]:
    """`SPLIT_SIZES["test"]` problems chosen by `seed` from the reserve (never in train or valid)."""
    pool = [problem for problem in problem_space() if is_test_candidate(problem[0])]
    chosen = random.Random(seed).sample(pool, SPLIT_SIZES["test"])
    return tuple(Sample(id=f"arith-test-{i}", prompt=p, answer=a) for i, (p, a) in enumerate(chosen))


class ArithBenchmark(PublicArithBenchmark):
    """arith as the grader sees it: the public benchmark plus the test split of `test_seed`."""

    def __init__(self, test_seed: int = DEFAULT_TEST_SEED) -> None:
        self.test_seed = test_seed

    def load(self, split: Split) -> list[Sample]:
        if split == "test":
            return list(test_split(self.test_seed))
        return super().load(split)
