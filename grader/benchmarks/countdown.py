"""`countdown`'s hidden test split: problems drawn with the run's secret seed among those reserved for test.

The game itself (prompt, safe expression checker, train/valid) is public, in `tasks.countdown`.
"""

from __future__ import annotations

import random
from functools import lru_cache

from grader.benchmarks.base import HiddenTestHalf
from tasks.base import Sample
from tasks.countdown import (
    MAX_EXPRESSION_CHARS,
    SPLIT_SEEDS,
    SPLIT_SIZES,
    TEST_MODULUS,
    ExpressionError,
    _problem,
    candidate_expression,
    check_solution,
    evaluate_expression,
    is_test_candidate,
    make_sample,
    problem_key,
)
from tasks.countdown import CountdownBenchmark as PublicCountdownBenchmark

__all__ = [
    "MAX_EXPRESSION_CHARS",
    "SPLIT_SEEDS",
    "SPLIT_SIZES",
    "TEST_MODULUS",
    "CountdownBenchmark",
    "ExpressionError",
    "candidate_expression",
    "check_solution",
    "evaluate_expression",
    "test_split",
]


@lru_cache(maxsize=8)
def test_split(seed: int) -> tuple[Sample, ...]:
    """`SPLIT_SIZES["test"]` distinct reserved problems (never in train or valid) generated from `seed`."""
    rng = random.Random(seed)
    taken: set[str] = set()
    samples: list[Sample] = []
    while len(samples) < SPLIT_SIZES["test"]:
        numbers, target, expr = _problem(rng)
        key = problem_key(numbers, target)
        if key in taken or not is_test_candidate(numbers, target):
            continue
        taken.add(key)
        samples.append(make_sample("test", len(samples), numbers, target, expr))
    return tuple(samples)


class CountdownBenchmark(HiddenTestHalf, PublicCountdownBenchmark):
    """countdown as the grader sees it: the public benchmark plus the test split of `test_seed`."""

    def test_samples(self) -> list[Sample]:
        return list(test_split(self.test_seed))
