"""`arith`'s hidden test split: drawn with the run's secret seed from the problems `tasks.arith` reserves for test.

Everything else about arith (prompts, scoring, train/valid) is public, in `tasks.arith`.
"""

from __future__ import annotations

import random
from functools import lru_cache

from grader.benchmarks.base import HiddenTestHalf
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
from tasks.base import Sample

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


class ArithBenchmark(HiddenTestHalf, PublicArithBenchmark):
    """arith as the grader sees it: the public benchmark plus the test split of `test_seed`."""

    def test_samples(self) -> list[Sample]:
        return list(test_split(self.test_seed))
