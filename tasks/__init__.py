"""The public half of every benchmark: what trainers and the trainer image may know.

`Sample`, the `Benchmark` protocols, answer matching, and for each built-in benchmark its description, prompt
formats, stop strings, scoring and train/valid splits. The test splits are not here: the grader draws them
(grader/benchmarks/) from a secret only it holds, and every benchmark from `tasks.get_benchmark` refuses
`load("test")` with `HeldOutSplitError`. Nothing in this package imports `grader` or `agent`.
"""

from __future__ import annotations

from tasks.base import (
    Benchmark,
    Game,
    HeldOutSplitError,
    MultiTurnBenchmark,
    PromptFormatting,
    Sample,
    Split,
)
from tasks.registry import (
    BENCHMARKS,
    BUILTINS,
    BenchmarkInfo,
    describe_benchmarks,
    get_benchmark,
    list_benchmarks,
    registry_problems,
    write_jsonl,
)

__all__ = [
    "BENCHMARKS",
    "BUILTINS",
    "Benchmark",
    "BenchmarkInfo",
    "Game",
    "HeldOutSplitError",
    "MultiTurnBenchmark",
    "PromptFormatting",
    "Sample",
    "Split",
    "describe_benchmarks",
    "get_benchmark",
    "list_benchmarks",
    "registry_problems",
    "write_jsonl",
]
