"""`gsm8k`'s test split: the official test file, read by the grader only (the sandbox never mounts the data).

Prompts, scoring, and train/valid are public, in `tasks.gsm8k`. The test set is fixed data, so `test_seed` does not
change it.
"""

from __future__ import annotations

from grader.benchmarks.base import HiddenTestHalf
from tasks.base import Sample
from tasks.gsm8k import (
    VALID_SEED,
    VALID_SIZE,
    GSM8KDataError,
    data_dir_candidates,
    find_data_dir,
    make_sample,
    solution_text,
)
from tasks.gsm8k import GSM8KBenchmark as PublicGSM8KBenchmark

__all__ = [
    "VALID_SEED",
    "VALID_SIZE",
    "GSM8KBenchmark",
    "GSM8KDataError",
    "data_dir_candidates",
    "find_data_dir",
    "solution_text",
]


class GSM8KBenchmark(HiddenTestHalf, PublicGSM8KBenchmark):
    """gsm8k as the grader sees it: the public benchmark plus the official test file (`test_seed` does not change
    it)."""

    def test_samples(self) -> list[Sample]:
        return [make_sample("test", i, row) for i, row in enumerate(self._rows("test"))]
