"""The benchmark protocols and `Sample`: the same objects as `tasks.base`, re-exported for the grader's code."""

from __future__ import annotations

from tasks.base import (
    BatchScoring,
    Benchmark,
    Game,
    HeldOutSplitError,
    MultiTurnBenchmark,
    PromptFormatting,
    Sample,
    Split,
    public_split,
    reserved_for_test,
)

__all__ = [
    "BatchScoring",
    "Benchmark",
    "Game",
    "HeldOutSplitError",
    "MultiTurnBenchmark",
    "PromptFormatting",
    "Sample",
    "Split",
    "public_split",
    "reserved_for_test",
]
