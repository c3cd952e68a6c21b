"""Variants of `arith` whose data are not what the default recipe needs, while the task stays exactly checkable.

Each keeps arith's problems, prompts and hidden test split (clean: the grader's test half is arith's, drawn from the
same reserve) and changes only the public data a trial is handed, in a way post-training researchers meet:

- `arith-noisy`: a share of the train and valid answers are wrong (near misses, as a careless annotator or a weak
  teacher model writes them). Running SFT on the rows as given learns the slips with the sums.
- `arith-few`: only a few hundred train prompts carry an answer; the rest, and valid, are prompts alone (answer "").
- `arith-verbose`: every answer is written as a sentence ("The answer is 95."), while the grader reads the first
  number written right after '='.
- `arith-messy`: both at once: sentences, a share of them wrong (a filter and a reformat, neither enough alone).

Their score is the verifier (`ArithBenchmark.verify`: the result computed from the prompt), so a wrong or missing
answer in the data never changes what a completion scores; on the clean test split it equals arith's score.
Which rows are changed is fixed by a public hash of the prompt (as `tasks.base.reserved_for_test`), so the splits
are the same on every machine.
"""

from __future__ import annotations

import hashlib
import random
from functools import lru_cache

from tasks.arith import ArithBenchmark
from tasks.base import Sample, Split, public_split

NOISE_SHARE = 0.4  # arith-noisy: the share of train and valid answers that are wrong
NOISE_MAX_OFFSET = 10  # a wrong answer is the result moved by 1..10 either way (never below 0)
LABELLED_TRAIN = 256  # arith-few: train prompts that keep their answer (the first ones); valid has none
VERBOSE_TEMPLATE = "The answer is {answer}."  # arith-verbose: how every train and valid answer is written
# how every variant's description begins
_AS_ARITH = (
    "Two-operand integer arithmetic as in arith: prompts like '37+58=' (operands 0-99, non-negative results)"
)


def _unit(name: str, key: str) -> float:
    """A public, deterministic draw in [0, 1) for `key`: the same on every machine and in every process."""
    digest = hashlib.sha256(f"{name}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


def near_miss(prompt: str, answer: str) -> str:
    """A wrong answer close to `answer` (1..NOISE_MAX_OFFSET away, never negative), fixed by the prompt."""
    rng = random.Random(f"arith-noisy-slip:{prompt}")
    value = int(answer)
    offsets = [d for d in range(-NOISE_MAX_OFFSET, NOISE_MAX_OFFSET + 1) if d and value + d >= 0]
    return str(value + rng.choice(offsets))


class _ArithVariant(ArithBenchmark):
    """arith with its public samples rewritten by `_rewrite`; scored by the verifier."""

    variant_of = "arith"  # the benchmark whose problems and test reserve it shares (a model built on it fits)

    def load(self, split: Split) -> list[Sample]:
        public_split(self.name, split)
        return list(_rewritten(self.name, split))

    def _rewrite(self, sample: Sample, index: int, split: str) -> Sample:
        raise NotImplementedError

    def score(self, completion: str, sample: Sample) -> float:
        return self.verify(completion, sample.prompt)


@lru_cache(maxsize=16)
def _rewritten(name: str, split: str) -> tuple[Sample, ...]:
    bench = next(variant for variant in VARIANTS if variant.name == name)()
    clean = ArithBenchmark().load(split)  # type: ignore[arg-type]
    return tuple(
        bench._rewrite(s, i, split).model_copy(update={"id": s.id.replace("arith", bench.name, 1)})
        for i, s in enumerate(clean)
    )


class ArithNoisyBenchmark(_ArithVariant):
    """arith whose train and valid answers are wrong for `NOISE_SHARE` of the problems."""

    name = "arith-noisy"
    description = (
        f"{_AS_ARITH}; write the result right after '=' and stop. About {NOISE_SHARE:.0%} of the answers in train "
        "and valid are wrong (near misses: a careless annotator's slips). The score is exact: the completion's "
        "first number against the result computed from the prompt, not against the answer column."
    )

    def _rewrite(self, sample: Sample, index: int, split: str) -> Sample:
        if _unit(self.name, sample.prompt) >= NOISE_SHARE:
            return sample
        return sample.model_copy(update={"answer": near_miss(sample.prompt, sample.answer)})


class ArithFewBenchmark(_ArithVariant):
    """arith with `LABELLED_TRAIN` labelled train prompts; the other train prompts and valid have no answer."""

    name = "arith-few"
    description = (
        f"{_AS_ARITH}; write the result right after '=' and stop. Only the first {LABELLED_TRAIN} train prompts "
        "carry an answer; the other train prompts and the valid prompts have none (answer is empty). The score is "
        "exact: the completion's first number against the result computed from the prompt."
    )

    def _rewrite(self, sample: Sample, index: int, split: str) -> Sample:
        if split == "train" and index < LABELLED_TRAIN:
            return sample
        return sample.model_copy(update={"answer": ""})


class ArithVerboseBenchmark(_ArithVariant):
    """arith whose train and valid answers are sentences; the grader still reads a bare number after '='."""

    name = "arith-verbose"
    description = (
        f"{_AS_ARITH}. The train and valid answers are written as sentences "
        f"('{VERBOSE_TEMPLATE.format(answer=95)}'); the grader reads the first number written right after '=' (6 new "
        "tokens at most, cut at a space or newline), so '95' scores and 'The answer is 95.' does not. The score is "
        "exact: that number against the result computed from the prompt."
    )

    def _rewrite(self, sample: Sample, index: int, split: str) -> Sample:
        return sample.model_copy(update={"answer": VERBOSE_TEMPLATE.format(answer=sample.answer)})


class ArithMessyBenchmark(_ArithVariant):
    """arith-noisy's slips written as arith-verbose's sentences: two things wrong with the data at once."""

    name = "arith-messy"
    description = (
        f"{_AS_ARITH}. The train and valid answers are written as sentences "
        f"('{VERBOSE_TEMPLATE.format(answer=95)}'), and about {NOISE_SHARE:.0%} of them are wrong (near misses: a "
        "careless annotator's slips); the grader reads the first number written right after '=' (6 new tokens at "
        "most, cut at a space or newline). The score is exact: that number against the result computed from the "
        "prompt, not against the answer column."
    )

    def _rewrite(self, sample: Sample, index: int, split: str) -> Sample:
        answer = sample.answer
        if _unit(self.name, sample.prompt) < NOISE_SHARE:
            answer = near_miss(sample.prompt, answer)
        return sample.model_copy(update={"answer": VERBOSE_TEMPLATE.format(answer=answer)})


VARIANTS: tuple[type[_ArithVariant], ...] = (
    ArithNoisyBenchmark,
    ArithFewBenchmark,
    ArithVerboseBenchmark,
    ArithMessyBenchmark,
)
