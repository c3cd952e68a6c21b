"""Benchmarks as the grader sees them: the `tasks` package's benchmarks plus their hidden test splits.

The protocols, `Sample` and the registry (`tasks.registry.BENCHMARKS`) are `tasks`' own objects, re-exported;
`get_benchmark` here returns benchmarks whose `load("test")` works (`tasks.get_benchmark`'s refuse it).
"""

from __future__ import annotations

from grader.benchmarks import registry
from tasks.base import Benchmark, Game, MultiTurnBenchmark, PromptFormatting, Sample, Split

# the grader's lookups (whose benchmarks can draw test), under the same names as `tasks`' public ones
BenchmarkInfo = registry.BenchmarkInfo
describe_benchmarks = registry.describe_benchmarks
get_benchmark = registry.get_benchmark
list_benchmarks = registry.list_benchmarks
registry_problems = registry.registry_problems

__all__ = ["Benchmark", "Game", "MultiTurnBenchmark", "PromptFormatting", "Sample", "Split"]
__all__ += [
    "BenchmarkInfo",
    "describe_benchmarks",
    "get_benchmark",
    "list_benchmarks",
]
__all__ += ["registry_problems"]
