"""The hidden test halves of arith's variants (tasks/arith_variants.py): arith's own test split, clean, drawn with
the run's secret seed from the problems `tasks.arith` reserves for test. Only the public data differ."""

from __future__ import annotations

from grader.benchmarks.arith import test_split
from grader.benchmarks.base import HiddenTestHalf
from tasks.arith_variants import ArithFewBenchmark as PublicArithFew
from tasks.arith_variants import ArithMessyBenchmark as PublicArithMessy
from tasks.arith_variants import ArithNoisyBenchmark as PublicArithNoisy
from tasks.arith_variants import ArithVerboseBenchmark as PublicArithVerbose
from tasks.base import Sample

__all__ = ["ArithFewBenchmark", "ArithMessyBenchmark", "ArithNoisyBenchmark", "ArithVerboseBenchmark"]


class _TestHalf(HiddenTestHalf):
    """A variant as the grader sees it: its public splits plus arith's clean test split of `test_seed`."""

    name: str

    def test_samples(self) -> list[Sample]:
        return [
            s.model_copy(update={"id": s.id.replace("arith", self.name, 1)})
            for s in test_split(self.test_seed)
        ]


class ArithNoisyBenchmark(_TestHalf, PublicArithNoisy):
    pass


class ArithFewBenchmark(_TestHalf, PublicArithFew):
    pass


class ArithVerboseBenchmark(_TestHalf, PublicArithVerbose):
    pass


class ArithMessyBenchmark(_TestHalf, PublicArithMessy):
    pass
