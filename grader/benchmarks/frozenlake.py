"""`frozenlake` as the grader sees it: the public game (`tasks.frozenlake`) plus the test games of `test_seed`."""

from __future__ import annotations

from grader.benchmarks.textgames import HeldTestGames
from tasks.frozenlake import FrozenLakeBenchmark as PublicFrozenLakeBenchmark

__all__ = ["FrozenLakeBenchmark"]


class FrozenLakeBenchmark(HeldTestGames, PublicFrozenLakeBenchmark):
    """frozenlake with the test games of the run's secret seed."""
