"""Free validation: a trial's checkpoint scored on the workspace's public `valid` split, before the grader sees it.

The split is the one the agent already holds (`data/valid.jsonl`), never the hidden test set, so scoring on it costs
no submission. It runs host-side with the grader's own pieces: the checkpoint is inspected and loaded the grader's
safe way (`grader.checkpoint`: no remote code, pickle-free weights, LoRA merged onto the base), the base model's
tokenizer is used, and generation goes through the grader's engine with its batching and stop strings
(`grader.engines`, `grader.evaluation.build_prompts`), under the run's `EvalConfig` with the grader's batch size. The
per-sample results go to `trials/<trial_id>/validation.json` (the base model's to `trials/base/validation.json`):

    {"score", "n", "ci_low", "ci_high", "samples": [{"id", "prompt", "expected", "got", "correct"}]}

Multi-turn games are played, as the grader plays its test games: the valid split's boards (the first turn of each
expert game in data/valid.jsonl) are started and played to the end, and the score is the share won. Scoring the
expert's turns one reply at a time measures something else: a model can answer most turns optimally and still lose
most games, and a search steered by that would keep its best checkpoints back.
"""

from __future__ import annotations

import math
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agent.core import Validation, ValidSample
from grader.benchmarks import Benchmark, Sample
from grader.config import EvalConfig
from grader.stats import bootstrap_ci
from tasks.answers import cut_at_stop
from tasks.atomic import atomic_write_json
from tasks.base import MultiTurnBenchmark, stop_strings
from tasks.textgames import TextArenaGameBenchmark

VALID_LIMIT = 500  # samples of the valid split scored per checkpoint by default (`RunConfig.valid_limit`)
BASE_ID = "base"  # the folder under trials/ that holds the base model's validation.json
VALID_CHUNK = 100  # a checkpoint is validated this many samples at a time, until its place is clear
EARLY_LEVEL = 0.99  # the interval that must clear the reference before a validation stops early


def valid_samples(benchmark: Benchmark, limit: int | None = VALID_LIMIT) -> list[Sample]:
    """The first `limit` samples of the benchmark's public valid split: the rows of the workspace's
    data/valid.jsonl, with the fields a scorer may need besides id, prompt and answer (countdown's numbers)."""
    samples = list(
        benchmark.valid_games() if isinstance(benchmark, TextArenaGameBenchmark) else benchmark.load("valid")
    )
    if not samples:
        raise ValueError(f"the valid split of {benchmark.name} is empty; nothing to validate on")
    return samples[:limit]


def validation_file(trials_dir: Path, trial_id: str) -> Path:
    return trials_dir / trial_id / "validation.json"


def load_validation(path: Path) -> Validation | None:
    """A validation.json written earlier (by the host, in its own record of the trial), or None when there is none
    or it cannot be read; read without following links."""
    from sandbox import untrusted

    try:
        return Validation.model_validate_json(
            untrusted.read_text(path.parent, path.name, max_bytes=64 * 1024**2)
        )
    except (OSError, ValueError):
        return None


def _load(checkpoint: Path, base_model: Path) -> Any:
    """The model a submission of `checkpoint` would stand for, loaded exactly as the grader loads it."""
    from transformers.utils import logging as hf_logging

    from grader.checkpoint import BaseModelReference, CheckpointError, inspect_checkpoint, load_checkpoint
    from grader.config import CheckpointLimits
    from sandbox import untrusted

    hf_logging.disable_progress_bar()  # the run's console shows one line per validation, not a bar per load

    limits = CheckpointLimits()
    try:  # a finished trial's folder (nothing writes it any more), made of regular files only: then it is loaded
        untrusted.walk(checkpoint, limits=untrusted.TreeLimits(limits.max_files, limits.max_total_bytes))
    except OSError as exc:
        raise CheckpointError(f"checkpoint refused: {exc}") from None
    reference = BaseModelReference.read(base_model.resolve())
    info = inspect_checkpoint(checkpoint, reference, limits)
    return load_checkpoint(info, reference.path)


def validate(
    checkpoint: Path,
    *,
    base_model: Path,
    samples: list[Sample],
    benchmark: Benchmark,
    config: EvalConfig,
    out: Path | None = None,
    settled: Callable[[list[float]], bool] | None = None,
    chunk: int = VALID_CHUNK,
) -> Validation:
    """Score `checkpoint` on `samples` with the grader's loader, engine and batching; write `out` when given.

    With `settled`, the samples are scored `chunk` at a time and scoring stops once `settled` says the scores so far
    answer what the validation is for (`clearly_apart`): the result holds the samples scored (`n`, its CI as wide
    as they make it) and `planned`. Raises `grader.checkpoint.CheckpointError` for a folder the grader would refuse."""
    from transformers import AutoTokenizer

    from grader.config import pin_chat
    from grader.engines import choose_engine, close_engine
    from grader.evaluation import build_prompts, play_games

    started = time.perf_counter()
    model = _load(checkpoint, base_model)
    tokenizer = AutoTokenizer.from_pretrained(str(base_model), trust_remote_code=False)
    config = pin_chat(config, tokenizer)  # chat prompts: the base template's stop tokens, as the grader's
    stop = stop_strings(benchmark, config.prompt_style)
    max_new = config.max_new_tokens or benchmark.max_new_tokens
    spec = choose_engine(config)
    step = max(chunk, 1) if settled is not None else len(samples)
    rows: list[ValidSample] = []
    with tempfile.TemporaryDirectory(prefix=f"valid-{spec.name}-") as scratch:
        engine = spec.from_model(model, tokenizer, Path(scratch), config)
        try:
            for start in range(0, len(samples), step):
                part = samples[start : start + step]
                if isinstance(benchmark, MultiTurnBenchmark):
                    won, replies = play_games(engine, part, benchmark, config, tokenizer)
                    rows += [
                        ValidSample(
                            id=sample.id,
                            prompt=sample.prompt,
                            expected=sample.answer,
                            got=f"{'won' if score else 'not won'} after {turns} replies",
                            correct=score,
                        )
                        for sample, score, turns in zip(part, won, replies, strict=True)
                    ]
                else:
                    prompts = build_prompts(benchmark, part, config, tokenizer)
                    texts = engine.generate(prompts, max_new_tokens=max_new, stop=stop, config=config)
                    for sample, text in zip(part, texts, strict=True):
                        got = cut_at_stop(text, stop)
                        rows.append(
                            ValidSample(
                                id=sample.id,
                                prompt=sample.prompt,
                                expected=sample.answer,
                                got=got,
                                correct=float(benchmark.score(got, sample)),
                            )
                        )
                if settled is not None and len(rows) < len(samples) and settled([r.correct for r in rows]):
                    break
        finally:
            close_engine(engine)
    scores = [r.correct for r in rows]
    low, high = bootstrap_ci(scores, resamples=config.bootstrap_resamples, seed=config.seed)
    result = Validation(
        score=sum(scores) / len(scores),
        n=len(scores),
        ci_low=low,
        ci_high=high,
        seconds=round(time.perf_counter() - started, 3),
        planned=len(samples) if len(rows) < len(samples) else None,
        samples=rows,
    )
    if out is not None:
        atomic_write_json(out, result.model_dump(mode="json"))
    return result


def clearly_apart(scores: list[float], reference: float | Validation, *, level: float = EARLY_LEVEL) -> bool:
    """Whether the scores so far are beyond doubt above or below `reference`: their bootstrap interval at `level`,
    stricter than the 95% the decision itself uses since the scores are looked at several times, clears it. A
    reference that is a validation is itself an estimate: its whole 95% CI must be cleared, so a validation that
    stops early above it is one `submission.beats_beyond_noise` accepts. A validation sized by this stops where its
    answer is clear, not at a fixed count."""
    if len(scores) < 2:
        return False
    ref_low, ref_high = (
        (reference.ci_low, reference.ci_high) if isinstance(reference, Validation) else (reference, reference)
    )
    low, high = bootstrap_ci(scores, resamples=1000, seed=0, level=level)
    return low > ref_high or high < ref_low


def paired_gain_mean(new: Validation, ref: Validation) -> float | None:
    """`new`'s mean gain over `ref` on the samples both scored (paired by id), or None when they share none. Two
    validations may have stopped after different numbers of samples (`clearly_apart`): their scores are means over
    different samples, and only the shared ones compare like with like."""
    theirs = ref.by_id()
    diffs = [s.correct - theirs[s.id] for s in new.samples if s.id in theirs]
    return sum(diffs) / len(diffs) if diffs else None


def gain_low(new: Validation, ref: Validation) -> float:
    """The 95% lower bound of `new.score - ref.score` counting both scores' noise: the half-widths of the two CIs on
    the sides that meet, combined in quadrature (Newcombe's hybrid interval for a difference). A reference scored on
    few samples (its validation stopped once clearly above its own reference) is itself uncertain: comparing `new`'s
    CI with its point score alone took a copy of the reference, scored on more samples, for a gain."""
    return new.score - ref.score - math.hypot(new.score - new.ci_low, ref.ci_high - ref.score)


def paired_gain_low(
    new: Validation, ref: Validation, *, resamples: int = 1000, seed: int = 0
) -> float | None:
    """The 95% bootstrap lower bound of `new`'s mean gain over `ref` on the samples both scored (paired by id), or
    None when they share no sample. Pairing removes the between-sample noise both scores carry."""
    theirs = ref.by_id()
    diffs = [s.correct - theirs[s.id] for s in new.samples if s.id in theirs]
    if not diffs:
        return None
    if not any(diffs):
        return 0.0
    return bootstrap_ci(diffs, resamples=resamples, seed=seed)[0]
