"""The hidden test halves of arith's variants (tasks/arith_variants.py): arith's own test split, clean, drawn with
the run's secret seed from the problems `tasks.arith` reserves for test. Only the public data differ."""

from __future__ import annotations

from grader.benchmarks.arith import test_split
from grader.benchmarks.secret import DEFAULT_TEST_SEED
from tasks.arith_variants import ArithFewBenchmark as PublicArithFew
from tasks.arith_variants import ArithNoisyBenchmark as PublicArithNoisy
from tasks.arith_variants import ArithVerboseBenchmark as PublicArithVerbose
from tasks.base import Sample, Split

__all__ = ["ArithFewBenchmark", "ArithNoisyBenchmark", "ArithVerboseBenchmark"]


class _TestHalf:
    """A variant as the grader sees it: its public splits plus arith's clean test split of `test_seed`."""

    name: str

    def __init__(self, test_seed: int = DEFAULT_TEST_SEED) -> None:
        self.test_seed = test_seed

    def load(self, split: Split) -> list[Sample]:
        if split == "test":
            return [
                s.model_copy(update={"id": s.id.replace("arith", self.name, 1)})
                for s in test_split(self.test_seed)
            ]
        return super().load(split)  # type: ignore[misc, no-any-return]


class ArithNoisyBenchmark(_TestHalf, PublicArithNoisy):
    pass


class ArithFewBenchmark(_TestHalf, PublicArithFew):
    pass


class ArithVerboseBenchmark(_TestHalf, PublicArithVerbose):
    pass
