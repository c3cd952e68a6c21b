"""What a benchmark is: seeded splits of samples, a prompt format, and a scoring rule."""

from __future__ import annotations

from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

Split = Literal["train", "valid", "test"]


class Sample(BaseModel):
    """One problem. `answer` is the reference the scorer compares against; `prompt` is what the model sees."""

    id: str
    prompt: str
    answer: str
    meta: dict[str, str | int | float] = Field(default_factory=dict)


@runtime_checkable
class Benchmark(Protocol):
    """A benchmark the grader can score and the agent can train on.

    `train` and `valid` are handed to the agent's workspace; `test` stays with the grader.
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
class PromptFormatting(Protocol):
    """Optional: a benchmark with more than one way to ask (zero-shot, chain-of-thought, few-shot).

    Benchmarks without it are asked with `Sample.prompt`, and few-shot exemplars are written as prompt + answer.
    """

    prompt_formats: list[str]  # always includes "default"

    def format_prompt(self, sample: Sample, prompt_format: str, exemplars: list[Sample]) -> str:
        """The text the model sees for `sample`; `exemplars` come from the train split."""
        ...


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
