"""`humaneval`'s test split (problems 82-163) and its scoring in a namespace sandbox (grader/code_exec.py).

Prompts, splits and program building are public, in `tasks.humaneval`. The test samples carry the task id as their
answer and no test code; the scorer looks the tests up. The test set is fixed data, so `test_seed` does not change it.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from grader import code_exec
from grader.benchmarks.base import HiddenTestHalf
from tasks.base import Sample
from tasks.humaneval import PUBLIC_PROBLEMS, all_records, make_sample
from tasks.humaneval import HumanEvalBenchmark as PublicHumanEvalBenchmark

__all__ = ["HumanEvalBenchmark"]


class HumanEvalBenchmark(HiddenTestHalf, PublicHumanEvalBenchmark):
    """humaneval as the grader sees it: problems 82-163 as test (`test_seed` does not change them), every program
    executed in the sandbox."""

    def records(self) -> tuple[dict[str, Any], ...]:
        return all_records()

    def test_samples(self) -> list[Sample]:
        rows = all_records()
        return [make_sample(i, rows[i], with_reference=False) for i in range(PUBLIC_PROBLEMS, len(rows))]

    def score_batch(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        outcomes = code_exec.execute(self.programs(completions, samples), self.limits, self.workers)
        return [1.0 if o.passed else 0.0 for o in outcomes]
