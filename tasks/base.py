"""What a benchmark is: seeded splits of samples, a prompt format, and a scoring rule.

Trainers see `train` and `valid`; only the grader can draw `test` (grader/benchmarks/), so this package, which the
trainer image ships, refuses it with `HeldOutSplitError`.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Callable, Sequence
from typing import Any, Literal, Protocol, TypeVar, runtime_checkable

from pydantic import BaseModel, Field

P = TypeVar("P")

Split = Literal["train", "valid", "test"]


class HeldOutSplitError(PermissionError):
    """`load("test")` outside the grader: the hidden split is drawn from a secret only the grader holds."""

    def __init__(self, benchmark: str) -> None:
        super().__init__(
            f"the test split of {benchmark} is held by the grader only; train on 'train' and check on 'valid'"
        )


def public_split(benchmark: str, split: str) -> None:
    """Raise unless `split` is one a trainer may read (train, valid)."""
    if split == "test":
        raise HeldOutSplitError(benchmark)
    if split not in ("train", "valid"):
        raise ValueError(f"unknown split {split!r} of {benchmark}; use 'train' or 'valid'")


def draw_public_splits(
    seeds: dict[str, int],
    sizes: dict[str, int],
    problem: Callable[[random.Random], P],
    key: Callable[[P], str],
    reserved: Callable[[P], bool],
    sample: Callable[[str, int, P], Sample],
) -> dict[str, list[Sample]]:
    """valid, then train, each drawn from its fixed public seed: a problem (by `key`) appears once across both, and
    never one `reserved` for the hidden test split."""
    taken: set[str] = set()
    out: dict[str, list[Sample]] = {}
    for split in ("valid", "train"):
        rng = random.Random(seeds[split])
        samples: list[Sample] = []
        while len(samples) < sizes[split]:
            drawn = problem(rng)
            name = key(drawn)
            if name in taken or reserved(drawn):
                continue
            taken.add(name)
            samples.append(sample(split, len(samples), drawn))
        out[split] = samples
    return out


def reserved_for_test(benchmark: str, key: str, modulus: int) -> bool:
    """The public rule that sets part of a problem space aside for test candidates: train and valid never hold a
    problem whose key hashes to 0 mod `modulus`, and the grader draws its test split only from those."""
    digest = hashlib.sha256(f"{benchmark}:{key}".encode()).digest()
    return int.from_bytes(digest[:8], "big") % modulus == 0


class Sample(BaseModel):
    """One problem. `answer` is the reference the scorer compares against; `prompt` is what the model sees."""

    id: str
    prompt: str
    answer: str
    meta: dict[str, str | int | float] = Field(default_factory=dict)


@runtime_checkable
class Benchmark(Protocol):
    """A benchmark the grader can score and the agent can train on.

    `train` and `valid` are handed to the agent's workspace; `test` stays with the grader (`tasks` raises
    `HeldOutSplitError` for it; grader.benchmarks draws it from the run's secret seed).
    """

    name: str
    description: str  # shown to the agent and in `rlloop benchmarks`
    max_new_tokens: int  # evaluation budget per sample
    stop: list[str]  # generation stops at any of these strings (and at EOS)

    def load(self, split: Split) -> list[Sample]:
        """Return the split's samples, deterministic for a given benchmark version."""
        ...

    def score(self, completion: str, sample: Sample) -> float:
        """1.0 for a correct completion, 0.0 otherwise (partial credit allowed)."""
        ...


@runtime_checkable
class BatchScoring(Protocol):
    """Optional: score a whole evaluation at once (a benchmark that executes code starts one sandbox per batch,
    not one per sample). The grader uses it instead of `score` where a benchmark has it; the results must agree."""

    def score_batch(self, completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        """`score(completions[i], samples[i])` for every i, in order."""
        ...


@runtime_checkable
class Verifier(Protocol):
    """Optional: an exact check of a completion from its prompt alone, without the reference answer. Where a task
    has one (arith computes the result from the prompt), rows whose answer is wrong can be found, and prompts
    without an answer can still reward RL or keep a sampled completion (trainers' `filter_by_verifier`, `rft`,
    GRPO's `verified` reward)."""

    def verify(self, completion: str, prompt: str) -> float:
        """1.0 when `completion` (already cut at the stop strings) is right for `prompt`, else 0.0."""
        ...


@runtime_checkable
class PromptFormatting(Protocol):
    """Optional: a benchmark with more than one way to ask (zero-shot, chain-of-thought, few-shot).

    Benchmarks without it are asked with `Sample.prompt`, and few-shot exemplars are written as prompt + answer.
    """

    prompt_formats: list[str]  # always includes "default"

    def format_prompt(self, sample: Sample, prompt_format: str, exemplars: list[Sample]) -> str:
        """The text the model sees for `sample`; `exemplars` come from the train split."""
        ...


@runtime_checkable
class SourceRecords(Protocol):
    """Optional: the dataset's own records of a public split, in its own fields (GSM8K: `question` and `answer`
    with the worked solution ending in `#### N`), one per `load(split)` sample and in the same order.

    External agents written for AutoRL-Bench read these from `$DATA_PATH/train.jsonl`; benchmarks without it are
    handed their normalised `{"id", "prompt", "answer"}` records instead.
    """

    def source_records(self, split: Split) -> list[dict[str, Any]]:
        """The split's records as the dataset itself lays them out (train and valid only)."""
        ...


@runtime_checkable
class TrialFiles(Protocol):
    """Optional: files a benchmark's own trial-side code reads (HumanEval: its public problems with their tests, for
    scoring), which the run writes into the workspace's data/ folder (`$DATA_PATH`). Trials never read the dataset
    where it is installed: that copy holds the test split too."""

    def trial_files(self) -> dict[str, str]:
        """{file name under data/: its text}; public data only."""
        ...


def stop_strings(benchmark: Benchmark, prompt_style: str) -> list[str]:
    """Where a completion is cut under `prompt_style`: the benchmark's `chat_stop` for chat prompts where it has one
    (a chat reply may open with what a plain stop string matches, e.g. a fenced `def`), else its `stop`."""
    chat = getattr(benchmark, "chat_stop", None)
    return list(chat if prompt_style == "chat" and chat is not None else benchmark.stop)


class Game(Protocol):
    """One game in play: the grader asks it for the model's next prompt and hands back the model's reply."""

    done: bool  # won, lost, or out of turns
    turns: int  # replies taken so far (an invalid reply is a turn too)

    def prompt(self, prompt_format: str) -> str:
        """What the model sees before its next move."""
        ...

    def step(self, reply: str) -> None:
        """Play the model's reply (its text, already cut at the benchmark's stop strings)."""
        ...

    def success(self) -> bool:
        """Whether the game was won."""
        ...


@runtime_checkable
class MultiTurnBenchmark(Benchmark, Protocol):
    """A benchmark whose *test* samples are games: the model plays up to `max_turns` turns per game and the score
    is the success rate. Its train/valid samples may be single turns (e.g. an expert's moves) to train on."""

    max_turns: int
    prompt_formats: list[str]

    def turn_budget(self, prompt_format: str) -> tuple[int, list[str]]:
        """(max new tokens, stop strings) of one reply in `prompt_format`: a compact board wants one short line,
        a transcript for a large model room to reason before it moves."""
        ...

    def start_game(self, sample: Sample) -> Game:
        """A fresh game for a test sample, in the same state every time."""
        ...
