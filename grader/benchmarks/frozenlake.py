"""`frozenlake` as the grader sees it: the public game (`tasks.frozenlake`) plus the test games of `test_seed`."""

from __future__ import annotations

from typing import Any

from grader.benchmarks.secret import DEFAULT_TEST_SEED
from grader.benchmarks.textgames import draw_test_games
from tasks.base import Sample, Split
from tasks.frozenlake import FrozenLakeBenchmark as PublicFrozenLakeBenchmark

__all__ = ["FrozenLakeBenchmark"]


class FrozenLakeBenchmark(PublicFrozenLakeBenchmark):
    def __init__(self, *args: Any, test_seed: int = DEFAULT_TEST_SEED, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.test_seed = test_seed

    def load(self, split: Split) -> list[Sample]:
        if split == "test":
            return draw_test_games(self, self.test_seed)
        return super().load(split)
