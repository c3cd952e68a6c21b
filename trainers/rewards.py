"""Reward functions for RL recipes, keyed by benchmark, built on `tasks.answers` so training and grading agree.

Each follows TRL's signature: `fn(prompts, completions, answer, **kwargs) -> list[float]`, where `answer` is the
dataset column of reference answers.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from typing import Any

from tasks import Sample, get_benchmark
from tasks.answers import cut_at_stop, extract_number, first_number, numbers_match
from tasks.base import stop_strings
from tasks.plugins import UnknownPluginError

RewardFunc = Callable[..., list[float]]

_ARITH_STOP = ("\n", " ")
_BARE_NUMBER = re.compile(r"-?\d+")


def _text(completion: Any) -> str:
    """Plain completions are strings; conversational ones are lists of messages (take the last content)."""
    if isinstance(completion, str):
        return completion
    if isinstance(completion, list) and completion and isinstance(completion[-1], dict):
        return str(completion[-1].get("content", ""))
    return str(completion)


def arith_correct(prompts: list[Any], completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """1.0 when the first number written (before a newline or space) equals the reference, as the grader scores."""
    return [
        1.0 if numbers_match(first_number(cut_at_stop(_text(c), _ARITH_STOP)), ref) else 0.0
        for c, ref in zip(completions, answer, strict=True)
    ]


def arith_format(prompts: list[Any], completions: list[Any], **_: Any) -> list[float]:
    """1.0 when the completion is just a number (what arith asks for), else 0.0: shapes early RL."""
    return [1.0 if _BARE_NUMBER.fullmatch(_text(c).strip()) else 0.0 for c in completions]


def gsm8k_correct(prompts: list[Any], completions: list[Any], answer: list[str], **_: Any) -> list[float]:
    """1.0 when the final answer (#### marker, 'the answer is', or last number) equals the reference."""
    return [
        1.0 if numbers_match(extract_number(_text(c)), ref) else 0.0
        for c, ref in zip(completions, answer, strict=True)
    ]


def benchmark_scorer(name: str, prompt_format: str = "plain") -> RewardFunc:
    """For any registered benchmark: its own `score`, after its stop strings for `prompt_format`, exactly as the
    grader applies them."""
    benchmark = get_benchmark(name)
    stop = stop_strings(benchmark, prompt_format)

    def correct(prompts: list[Any], completions: list[Any], answer: list[str], **_: Any) -> list[float]:
        return [
            float(
                benchmark.score(cut_at_stop(_text(c), stop), Sample(id="reward", prompt=str(p), answer=ref))
            )
            for p, c, ref in zip(prompts, completions, answer, strict=True)
        ]

    correct.__name__ = f"{name}_correct"
    return correct


_CORRECTNESS: dict[str, RewardFunc] = {"arith": arith_correct, "gsm8k": gsm8k_correct}
_FORMAT: dict[str, RewardFunc] = {"arith": arith_format}

REWARD_KINDS = ("correct", "format")


def reward_functions(
    benchmark: str, kinds: Sequence[str] = ("correct",), prompt_format: str = "plain"
) -> list[RewardFunc]:
    """The reward functions for `benchmark`; `kinds` picks among "correct" and "format". Under chat prompts a
    benchmark cut differently there (a fenced reply) is scored by its own scorer with its chat stop strings."""
    funcs: list[RewardFunc] = []
    for kind in kinds:
        if kind == "correct":
            if benchmark in _CORRECTNESS and prompt_format != "chat":
                funcs.append(_CORRECTNESS[benchmark])
            else:
                try:
                    funcs.append(benchmark_scorer(benchmark, prompt_format))
                except UnknownPluginError:
                    raise ValueError(
                        f"no reward function for benchmark {benchmark!r}; known: {', '.join(sorted(_CORRECTNESS))} "
                        "or any registered benchmark (see `rlloop benchmarks`)"
                    ) from None
        elif kind == "format":
            if benchmark not in _FORMAT:
                raise ValueError(
                    f"no format reward for benchmark {benchmark!r}; drop 'format' from reward_functions"
                )
            funcs.append(_FORMAT[benchmark])
        else:
            raise ValueError(f"unknown reward kind {kind!r}; use one of {', '.join(REWARD_KINDS)}")
    return funcs
