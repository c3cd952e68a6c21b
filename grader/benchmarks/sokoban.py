"""`sokoban` as the grader sees it: the public game (`tasks.sokoban`) plus the test rooms of `test_seed`."""

from __future__ import annotations

from typing import Any

from grader.benchmarks.secret import DEFAULT_TEST_SEED
from grader.benchmarks.textgames import draw_test_games
from tasks.base import Sample, Split
from tasks.sokoban import SokobanBenchmark as PublicSokobanBenchmark
from tasks.sokoban import optimal_first_moves, rows_from_board, solve_room

__all__ = ["SokobanBenchmark", "optimal_first_moves", "rows_from_board", "solve_room"]


class SokobanBenchmark(PublicSokobanBenchmark):
    def __init__(self, *args: Any, test_seed: int = DEFAULT_TEST_SEED, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.test_seed = test_seed

    def load(self, split: Split) -> list[Sample]:
        if split == "test":
            return draw_test_games(self, self.test_seed)
        return super().load(split)
