"""Benchmarks as the grader sees them: the `tasks` package's benchmarks plus their hidden test splits.

The protocols, `Sample` and the registry's discovery are `tasks`' own objects, re-exported; `get_benchmark` here
returns benchmarks whose `load("test")` works (`tasks.get_benchmark`'s refuse it).
"""

from __future__ import annotations

from grader.benchmarks.base import Benchmark, Game, MultiTurnBenchmark, PromptFormatting, Sample, Split
from grader.benchmarks.registry import (
    BenchmarkInfo,
    UnknownBenchmarkError,
    describe_benchmarks,
    get_benchmark,
    list_benchmarks,
    registry_problems,
)

__all__ = [
    "Benchmark",
    "BenchmarkInfo",
    "Game",
    "MultiTurnBenchmark",
    "PromptFormatting",
    "Sample",
    "Split",
    "UnknownBenchmarkError",
    "describe_benchmarks",
    "get_benchmark",
    "list_benchmarks",
    "registry_problems",
]
