"""Scoring a model on a benchmark: batched generation, stop strings, per-sample scores and a bootstrap CI.

Generation is batched with LEFT padding and the KV cache, prompts sorted by length so batches waste little padding,
and every sequence stops at EOS or at one of the benchmark's stop strings (a batch ends as soon as all of its
sequences have stopped). Decoding settings come only from `EvalConfig`, never from a checkpoint's
generation_config.json. Engines (grader/engines.py: transformers, vLLM, plugins) all serve one interface.
"""

from __future__ import annotations

import logging
import random
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from pydantic import BaseModel, Field

from grader.config import EvalConfig, pin_chat
from grader.engines import (
    ENGINES,
    GenerationEngine,
    HFEngine,
    VLLMEngine,
    choose_engine,
    close_engine,
    vllm_available,
)
from grader.prompts import chat_renderer
from grader.stats import bootstrap_ci
from tasks.answers import cut_at_stop
from tasks.base import BatchScoring, Benchmark, MultiTurnBenchmark, PromptFormatting, Sample, stop_strings

__all__ = [
    "ENGINES",
    "EvalResult",
    "GenerationEngine",
    "HFEngine",
    "VLLMEngine",
    "cut_at_stop",
    "evaluate",
    "evaluate_model",
    "run_evaluation",
    "vllm_available",
]

log = logging.getLogger(__name__)


class EvalResult(BaseModel):
    """The outcome of one evaluation. `scores[i]` belongs to `sample_ids[i]`, in the order samples were given."""

    score: float
    n: int
    ci_low: float
    ci_high: float
    seconds: float
    config_hash: str
    engine: str
    sample_ids: list[str] = Field(default_factory=list)
    scores: list[float] = Field(default_factory=list)
    turns: list[int] = Field(default_factory=list)  # multi-turn games only: replies per game

    @property
    def samples_per_second(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("inf")

    def correct_by_id(self) -> dict[str, float]:
        return dict(zip(self.sample_ids, self.scores, strict=True))


def pick_exemplars(train: Sequence[Sample], k: int, seed: int, exclude_prompts: set[str]) -> list[Sample]:
    """`k` few-shot exemplars from the train split, chosen by seed; none shares a prompt with the evaluated set."""
    if k == 0:
        return []
    pool = [s for s in train if s.prompt not in exclude_prompts]
    if len(pool) < k:
        raise ValueError(
            f"few_shot={k} but the train split has only {len(pool)} usable exemplars; lower few_shot"
        )
    return random.Random(seed).sample(pool, k)


def build_prompts(
    benchmark: Benchmark, samples: Sequence[Sample], config: EvalConfig, tokenizer: Any = None
) -> list[str]:
    """The prompts the model sees under `config`'s prompt format and few-shot count; with prompt_style="chat",
    each one as the user turn of `tokenizer`'s (the base model's) chat template."""
    chat = chat_renderer(config, tokenizer)
    if chat is not None:
        plain = build_prompts(benchmark, samples, config.model_copy(update={"prompt_style": "plain"}))
        return [chat.render(p) for p in plain]
    formats = list(getattr(benchmark, "prompt_formats", ["default"]))
    if config.prompt_format not in formats:
        raise ValueError(
            f"benchmark {benchmark.name!r} has no prompt format {config.prompt_format!r}; choose one of {formats}"
        )
    exemplars: list[Sample] = []
    if config.few_shot:
        exemplars = pick_exemplars(
            benchmark.load("train"), config.few_shot, config.seed, exclude_prompts={s.prompt for s in samples}
        )
    if isinstance(benchmark, PromptFormatting):
        return [benchmark.format_prompt(s, config.prompt_format, exemplars) for s in samples]
    prefix = "".join(f"{ex.prompt}{ex.answer}\n" for ex in exemplars)
    return [prefix + s.prompt for s in samples]


def select_samples(samples: Sequence[Sample], config: EvalConfig) -> list[Sample]:
    """The samples an evaluation covers: the first `limit` of them, or all."""
    chosen = list(samples[: config.limit] if config.limit else samples)
    if not chosen:
        raise ValueError("no samples to evaluate; pass a non-empty split")
    return chosen


def play_games(
    engine: GenerationEngine,
    samples: Sequence[Sample],
    benchmark: MultiTurnBenchmark,
    config: EvalConfig,
    tokenizer: Any = None,
) -> tuple[list[float], list[int]]:
    """Play every sample's game to the end; each turn is ONE batched generate call over the games still running.

    Returns (1.0 per won game else 0.0, replies per game), in sample order.
    """
    if config.few_shot:
        raise ValueError(
            f"{benchmark.name} is a multi-turn game: few-shot prompting is not supported; use few_shot=0"
        )
    if config.prompt_format not in benchmark.prompt_formats:
        raise ValueError(
            f"benchmark {benchmark.name!r} has no prompt format {config.prompt_format!r}; "
            f"choose one of {list(benchmark.prompt_formats)}"
        )
    chat = chat_renderer(config, tokenizer)
    games = [benchmark.start_game(sample) for sample in samples]
    budget, stop = benchmark.turn_budget(config.prompt_format)
    max_new = config.max_new_tokens or budget
    for _ in range(benchmark.max_turns):
        playing = [game for game in games if not game.done]
        if not playing:
            break
        prompts = [game.prompt(config.prompt_format) for game in playing]
        prompts = [chat.render(p) for p in prompts] if chat is not None else prompts
        replies = engine.generate(prompts, max_new_tokens=max_new, stop=stop, config=config)
        for game, reply in zip(playing, replies, strict=True):
            game.step(cut_at_stop(reply, stop))
    return [1.0 if game.success() else 0.0 for game in games], [game.turns for game in games]


def run_evaluation(
    engine: GenerationEngine,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    config: EvalConfig,
    tokenizer: Any = None,
) -> EvalResult:
    """Generate with `engine`, cut at stop strings, score each sample, and summarise with a bootstrap CI.

    Multi-turn benchmarks are played instead (`play_games`): the score is the success rate over their games.
    Chat prompts are rendered with `tokenizer` (the base model's; default: the engine's), whose template hash and
    stop tokens are pinned into the config the result's hash is made from.
    """
    tokenizer = tokenizer if tokenizer is not None else getattr(engine, "tokenizer", None)
    if config.prompt_style == "chat":
        config = pin_chat(config, tokenizer)
    chosen = select_samples(samples, config)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    turns: list[int] = []
    if isinstance(benchmark, MultiTurnBenchmark):
        scores, turns = play_games(engine, chosen, benchmark, config, tokenizer)
    else:
        prompts = build_prompts(benchmark, chosen, config, tokenizer)
        max_new = config.max_new_tokens or benchmark.max_new_tokens
        stop = stop_strings(benchmark, config.prompt_style)
        completions = engine.generate(prompts, max_new_tokens=max_new, stop=stop, config=config)
        cut = [cut_at_stop(text, stop) for text in completions]
        if isinstance(benchmark, BatchScoring):  # e.g. code execution: one sandbox for the whole batch
            scores = [float(x) for x in benchmark.score_batch(cut, chosen)]
        else:
            scores = [float(benchmark.score(text, s)) for text, s in zip(cut, chosen, strict=True)]
    seconds = time.perf_counter() - start
    low, high = bootstrap_ci(scores, resamples=config.bootstrap_resamples, seed=config.seed)
    return EvalResult(
        score=sum(scores) / len(scores),
        n=len(scores),
        ci_low=low,
        ci_high=high,
        seconds=seconds,
        config_hash=config.identity(),
        engine=engine.name,
        sample_ids=[s.id for s in chosen],
        scores=scores,
        turns=turns,
    )


def evaluate_model(
    model: Any,
    tokenizer: Any,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    config: EvalConfig,
    *,
    scratch_parent: Path | None = None,
) -> EvalResult:
    """Evaluate an already-loaded transformers model (the grader loads checkpoints itself, safely) with the engine
    `config.engine` names ("auto": the most capable one this machine can run). `scratch_parent`: where an engine
    that needs the weights on disk may write them (the grader's private folder)."""
    spec = choose_engine(config)
    with tempfile.TemporaryDirectory(prefix=f"engine-{spec.name}-", dir=scratch_parent) as scratch:
        engine = spec.from_model(model, tokenizer, Path(scratch), config)
        try:
            return run_evaluation(engine, samples, benchmark, config, tokenizer)
        finally:
            close_engine(engine)


def evaluate(
    model_path: Path,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    config: EvalConfig | None = None,
    *,
    tokenizer_path: Path | None = None,
) -> EvalResult:
    """Score the checkpoint at `model_path` on `samples` (loaded safely: no remote code, no pickles)."""
    from transformers import AutoTokenizer

    from grader.checkpoint import load_model

    config = config or EvalConfig()
    tokenizer_path = Path(tokenizer_path or model_path)
    spec = choose_engine(config)
    engine = spec.from_path(Path(model_path), tokenizer_path, config) if spec.from_path else None
    if engine is not None:  # an engine that reads the checkpoint's files itself (vLLM on safetensors)
        chat_tokenizer = None
        if config.prompt_style == "chat":
            chat_tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path), trust_remote_code=False)
        try:
            return run_evaluation(engine, samples, benchmark, config, chat_tokenizer)
        finally:
            close_engine(engine)
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path), trust_remote_code=False)
    return evaluate_model(load_model(Path(model_path)), tokenizer, samples, benchmark, config)
