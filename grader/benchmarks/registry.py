"""The grader's view of `tasks.registry.BENCHMARKS`: the same entries, resolved to benchmarks that draw their test
split.

A built-in's test half is the grader's subclass of its public class (`TEST_HALVES`): it draws test from `test_seed`
(the grading service passes its run's secret, grader/benchmarks/secret.py). Entry points and folder definitions are
the plugins' own objects, test split and all. Names, descriptions and problems are the registry's.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.benchmarks.arith import ArithBenchmark
from grader.benchmarks.arith_variants import (
    ArithFewBenchmark,
    ArithMessyBenchmark,
    ArithNoisyBenchmark,
    ArithVerboseBenchmark,
)
from grader.benchmarks.countdown import CountdownBenchmark
from grader.benchmarks.frozenlake import FrozenLakeBenchmark
from grader.benchmarks.gsm8k import GSM8KBenchmark
from grader.benchmarks.humaneval import HumanEvalBenchmark
from grader.benchmarks.secret import DEFAULT_TEST_SEED
from grader.benchmarks.sokoban import SokobanBenchmark, SokobanOneBoxBenchmark
from tasks.base import Benchmark
from tasks.registry import (
    BENCHMARKS,
    ENTRY_POINT_GROUP,
    FOLDER_ENV,
    BenchmarkDefinition,
    BenchmarkInfo,
    describe_benchmarks,
    list_benchmarks,
    make_benchmark,
    registry_problems,
    write_jsonl,
)

__all__ = [
    "BENCHMARKS",
    "ENTRY_POINT_GROUP",
    "FOLDER_ENV",
    "TEST_HALVES",
    "BenchmarkDefinition",
    "BenchmarkInfo",
    "describe_benchmarks",
    "get_benchmark",
    "list_benchmarks",
    "registry_problems",
    "write_jsonl",
]

# The built-ins' test halves, each a subclass of the public class the registry holds (tasks/<name>.py).
TEST_HALVES: tuple[type[Any], ...] = (
    ArithBenchmark,
    ArithNoisyBenchmark,
    ArithFewBenchmark,
    ArithVerboseBenchmark,
    ArithMessyBenchmark,
    GSM8KBenchmark,
    CountdownBenchmark,
    FrozenLakeBenchmark,
    SokobanBenchmark,
    SokobanOneBoxBenchmark,
    HumanEvalBenchmark,
)


def graded_class(entry: Callable[[], Any]) -> type[Any] | None:
    """The grader's class for a registry entry that is a built-in's public class, else None."""
    return next((half for half in TEST_HALVES if entry in half.__bases__), None)


def get_benchmark(name: str, test_seed: int | None = None) -> Benchmark:
    """The benchmark `name` with its test split; built-ins draw it from `test_seed` (default: a fixed public seed,
    for tests and scripts; the grading service always passes its run's secret). An unknown name raises the
    registry's `UnknownPluginError`, listing the known ones."""
    half = graded_class(BENCHMARKS.get(name))
    if half is not None:
        bench: Benchmark = half(test_seed=DEFAULT_TEST_SEED if test_seed is None else test_seed)
        return bench
    return make_benchmark(name)  # type: ignore[no-any-return]
