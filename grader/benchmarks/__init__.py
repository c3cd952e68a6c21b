"""Benchmarks: the `Benchmark` protocol, built-ins (arith, gsm8k, countdown, frozenlake, sokoban) and the registry that finds more."""

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
