"""The grader's registry: the same names as `tasks.registry`, resolved to benchmarks that can draw their test split.

Built-ins draw test from `test_seed` (the grading service passes its run's secret, grader/benchmarks/secret.py);
folder definitions read their own `test.jsonl`; entry points are the plugins' objects as they are. Discovery,
descriptions and problems are `tasks.registry`'s.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from grader.benchmarks.arith import ArithBenchmark
from grader.benchmarks.countdown import CountdownBenchmark
from grader.benchmarks.frozenlake import FrozenLakeBenchmark
from grader.benchmarks.gsm8k import GSM8KBenchmark
from grader.benchmarks.humaneval import HumanEvalBenchmark
from grader.benchmarks.secret import DEFAULT_TEST_SEED
from grader.benchmarks.sokoban import SokobanBenchmark
from tasks.base import Benchmark, Sample, Split
from tasks.registry import (
    ENTRY_POINT_GROUP,
    FOLDER_ENV,
    BenchmarkDefinition,
    BenchmarkInfo,
    Discovery,
    FolderBenchmark,
    UnknownBenchmarkError,
    describe_benchmarks,
    list_benchmarks,
    registry_problems,
    resolve,
    write_jsonl,
)
from tasks.registry import discover as discover_public

__all__ = [
    "BUILTINS",
    "ENTRY_POINT_GROUP",
    "FOLDER_ENV",
    "BenchmarkDefinition",
    "BenchmarkInfo",
    "GraderFolderBenchmark",
    "UnknownBenchmarkError",
    "describe_benchmarks",
    "discover",
    "get_benchmark",
    "list_benchmarks",
    "registry_problems",
    "write_jsonl",
]

BUILTINS: dict[str, Callable[..., Any]] = {
    "arith": ArithBenchmark,
    "gsm8k": GSM8KBenchmark,
    "countdown": CountdownBenchmark,
    "frozenlake": FrozenLakeBenchmark,
    "sokoban": SokobanBenchmark,
    "humaneval": HumanEvalBenchmark,
}


class GraderFolderBenchmark(FolderBenchmark):
    """A folder definition as the grader sees it: its test split too."""

    def load(self, split: Split) -> list[Sample]:
        return self.read_split(split)


def discover() -> Discovery:
    return discover_public(BUILTINS, GraderFolderBenchmark)


def get_benchmark(name: str, test_seed: int | None = None) -> Benchmark:
    """The benchmark `name` with its test split; built-ins draw it from `test_seed` (default: a fixed public seed,
    for tests and scripts; the grading service always passes its run's secret)."""
    if name in BUILTINS:
        bench: Benchmark = BUILTINS[name](test_seed=DEFAULT_TEST_SEED if test_seed is None else test_seed)
        return bench
    return resolve(name, discover())
