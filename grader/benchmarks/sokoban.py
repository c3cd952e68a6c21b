"""`sokoban` and `sokoban1` as the grader sees them: the public games (`tasks.sokoban`) plus the test rooms of
`test_seed`."""

from __future__ import annotations

from grader.benchmarks.textgames import HeldTestGames
from tasks.sokoban import SokobanBenchmark as PublicSokobanBenchmark
from tasks.sokoban import SokobanOneBoxBenchmark as PublicSokobanOneBoxBenchmark
from tasks.sokoban import optimal_first_moves, rows_from_board, solve_room

__all__ = [
    "SokobanBenchmark",
    "SokobanOneBoxBenchmark",
    "optimal_first_moves",
    "rows_from_board",
    "solve_room",
]


class SokobanBenchmark(HeldTestGames, PublicSokobanBenchmark):
    """sokoban with the test games of the run's secret seed."""


class SokobanOneBoxBenchmark(HeldTestGames, PublicSokobanOneBoxBenchmark):
    """sokoban1 with the test games of the run's secret seed."""
