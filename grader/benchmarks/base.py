"""What the grader adds to a public benchmark: the hidden test half, drawn from the run's secret test seed."""

from __future__ import annotations

from typing import Any

from grader.benchmarks.secret import DEFAULT_TEST_SEED
from tasks.base import Sample, Split

__all__ = ["HiddenTestHalf"]


class HiddenTestHalf:
    """Mixed in before a public benchmark: the grader's copy, whose test split (`test_samples`) only the grader can
    make, from the run's secret `test_seed`; every other split is the public one."""

    test_seed: int

    def __init__(self, *args: Any, test_seed: int = DEFAULT_TEST_SEED, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.test_seed = test_seed

    def test_samples(self) -> list[Sample]:
        raise NotImplementedError

    def load(self, split: Split) -> list[Sample]:
        if split == "test":
            return self.test_samples()
        return super().load(split)  # type: ignore[misc, no-any-return]
