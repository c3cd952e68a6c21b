"""rlloop's benchmark scorer as a verl reward function file (`reward.custom_reward_function.path`).

verl calls `compute_score(data_source, solution_str, ground_truth, extra_info)` per response; `data_source` is the
rlloop benchmark's name (the parquet's data_source column) and `ground_truth` the sample's answer. The score is
the benchmark's own (`tasks.get_benchmark(name).score`), the one the grader uses.
"""

from __future__ import annotations

from functools import cache
from typing import Any

from tasks import Benchmark, Sample, get_benchmark


@cache
def _benchmark(name: str) -> Benchmark:
    return get_benchmark(name)


def compute_score(
    data_source: str, solution_str: str, ground_truth: Any, extra_info: Any = None, **_: Any
) -> float:
    """The benchmark's score of `solution_str` against the sample's answer."""
    info = extra_info if isinstance(extra_info, dict) else {}
    sample = Sample(id=str(info.get("id", "")), prompt=str(info.get("prompt", "")), answer=str(ground_truth))
    return float(_benchmark(data_source).score(solution_str, sample))
