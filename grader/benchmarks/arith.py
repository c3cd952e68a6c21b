"""`arith`: procedurally generated two-operand arithmetic with fixed seeds.

Small enough that a ~1M-parameter model learns it on a laptop CPU in minutes, hard enough that a briefly trained one
gets only a fraction right: the benchmark rlloop's demo and tests run on. The hidden test split is generated first
and every test problem is excluded from train and valid, so memorising train cannot leak test answers.
"""

from __future__ import annotations

import random
from functools import lru_cache

from grader.answers import first_number, numbers_match
from grader.benchmarks.base import Sample, Split

SPLIT_SIZES: dict[str, int] = {"test": 1000, "valid": 300, "train": 12000}
SPLIT_SEEDS: dict[str, int] = {"test": 1_000_003, "valid": 2_000_003, "train": 3_000_017}
OPERATORS = ("+", "-")
MAX_OPERAND = 99


def _problem(rng: random.Random) -> tuple[str, str]:
    a, b = rng.randint(0, MAX_OPERAND), rng.randint(0, MAX_OPERAND)
    op = rng.choice(OPERATORS)
    if op == "-" and b > a:
        a, b = b, a
    result = a + b if op == "+" else a - b
    return f"{a}{op}{b}=", str(result)


@lru_cache(maxsize=1)
def _splits() -> dict[str, list[Sample]]:
    taken: set[str] = set()
    out: dict[str, list[Sample]] = {}
    for split in ("test", "valid", "train"):  # test first: it claims its problems before anyone else
        rng = random.Random(SPLIT_SEEDS[split])
        samples: list[Sample] = []
        while len(samples) < SPLIT_SIZES[split]:
            prompt, answer = _problem(rng)
            if prompt in taken:
                continue
            taken.add(prompt)
            samples.append(Sample(id=f"arith-{split}-{len(samples)}", prompt=prompt, answer=answer))
        out[split] = samples
    return out


class ArithBenchmark:
    """Two-digit addition and subtraction; the answer is the number right after '='."""

    name = "arith"
    description = (
        "Two-operand integer arithmetic: prompts like '37+58=' or '72-19=', operands 0-99, non-negative results. "
        "The model must write the result right after '=' and stop. Score: exact match of the first number written."
    )
    max_new_tokens = 6
    stop = ["\n", " "]

    def load(self, split: Split) -> list[Sample]:
        return list(_splits()[split])

    def score(self, completion: str, sample: Sample) -> float:
        return 1.0 if numbers_match(first_number(completion), sample.answer) else 0.0
