"""How every recipe run ends, TRL-driven or hand-written: the checkpoint, the log history and, last, metrics.json.

Saving is the part that must never go wrong: the checkpoint is written into `output_dir/.tmp`, moved into place file by
file, and `metrics.json` is written last (atomically, with `tasks.atomic`). A run killed at any point leaves no
`metrics.json`, so nobody mistakes a half-written checkpoint for a finished one. `finish_run` is the one place the
figures of `metrics.json` are computed, so each has one meaning for every recipe (see `TrainResult`).
"""

from __future__ import annotations

import json
import math
import os
import shutil
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks.atomic import atomic_write_json, atomic_write_lines
from trainers.config import TrainerConfig
from trainers.device import dtype_name, model_placement
from trainers.optimizer_state import OPTIMIZER_DIR, save_optimizer_state
from trainers.result import REWARD_WINDOW, TrainResult
from trainers.runtime import Pace, TrainedRun, log
from trainers.schedule import startup_parts

METRICS_FILE = "metrics.json"
LOG_HISTORY_FILE = "log_history.jsonl"
STAGING_DIR = ".tmp"


def prepare_output_dir(output_dir: Path) -> Path:
    """Create `output_dir`, drop a stale `metrics.json` (this run is not finished yet) and return a fresh staging dir."""
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / METRICS_FILE).unlink(missing_ok=True)
    shutil.rmtree(output_dir / OPTIMIZER_DIR, ignore_errors=True)  # a stale one would pass for this run's
    staging = output_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def plain_model(model: Any) -> tuple[PreTrainedModel, bool]:
    """The model to save: LoRA adapters merged in, so the grader loads an ordinary checkpoint."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload(), True
    return model, False


def save_checkpoint(model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, output_dir: Path) -> None:
    """Write safetensors + config + tokenizer into `output_dir/.tmp/checkpoint`, then move each file into place."""
    target = output_dir / STAGING_DIR / "checkpoint"
    shutil.rmtree(target, ignore_errors=True)
    model.save_pretrained(target, safe_serialization=True)
    tokenizer.save_pretrained(target)
    for item in sorted(target.iterdir()):
        destination = output_dir / item.name
        if destination.is_dir():
            shutil.rmtree(destination)
        os.replace(item, destination)


def finite(value: Any) -> float | None:
    """`value` as a float, or None when it is missing, not a number, or not finite."""
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def logged(history: Sequence[Mapping[str, Any]], key: str | None) -> list[float]:
    """The numeric values of `key` in the log history, in order (entries without it skipped)."""
    return [float(row[key]) for row in history if key and isinstance(row.get(key), int | float)]


def mean_or_none(values: Sequence[float]) -> float | None:
    return float(sum(values) / len(values)) if values else None


def finish_run(
    *,
    recipe: str,
    config: TrainerConfig,
    model: Any,
    tokenizer: PreTrainedTokenizerBase,
    history: Sequence[Mapping[str, Any]],
    train_seconds: float,
    steps: int,
    samples_seen: int,
    stopped_early: bool,
    train_loss: float | None,
    reward_key: str | None = "reward",
    train_tokens: int | None = None,
    eval_before: float | None = None,
    eval_after: float | None = None,
    extra: Mapping[str, float | None] | None = None,
    pace: Pace | None = None,
) -> TrainResult:
    """Save the checkpoint (LoRA merged), `log_history.jsonl` and, last, `metrics.json`; return the result.

    Call `prepare_output_dir(config.output_dir)` before training, so a stale metrics.json is gone while the run is in
    progress. `extra` holds the recipe's own figures; the shared ones (tokens, eval accuracy) are added here.
    """
    output_dir = Path(config.output_dir)
    save_started = time.monotonic()
    plain, merged = plain_model(model)
    where = model_placement(plain)  # before the move to CPU for saving: where training really ran
    save_checkpoint(plain.cpu(), tokenizer, output_dir)
    atomic_write_lines(output_dir / LOG_HISTORY_FILE, (json.dumps(row, default=str) for row in history))
    saving = time.monotonic() - save_started + (pace.optimizer_save_s if pace else 0.0)
    timing: dict[str, Any] = {}
    if pace is not None:
        last = pace.rate.last_factor * config.learning_rate
        timing = {
            "startup_seconds": round(pace.clock.startup_seconds, 3),
            "startup_parts": startup_parts(pace.clock.started_at, pace.clock.train_started or time.time()),
            "save_seconds": round(saving, 3),
            "wall_seconds": round(time.time() - pace.clock.started_at, 3),
            "schedule_progress": round(pace.rate.last_progress, 4) if pace.steps else 0.0,
            "lr_last": last if pace.steps else None,
        }
        if pace.steps and pace.rate.span != (
            0.0,
            1.0,
        ):  # a part of a line's schedule: where in the line it ended
            timing["line_progress"] = round(pace.rate.line_progress(pace.rate.last_progress), 4)
        if pace.steps and pace.rate.last_progress < 0.9 and config.lr_scheduler_type != "constant":
            log(
                f"the {config.lr_scheduler_type} schedule was followed to {pace.rate.last_progress:.0%} only "
                f"(the last rate {last:.3g}, not its end): the trial ended before its steps or seconds did"
            )
    rewards = logged(history, reward_key)
    figures: dict[str, float | None] = {
        **(extra or {}),
        "train_tokens": train_tokens,
        "tokens_per_second": train_tokens / max(train_seconds, 1e-9) if train_tokens is not None else None,
        "eval_accuracy_before": eval_before,
        "eval_accuracy": eval_after,
    }
    result = TrainResult(
        recipe=recipe,
        output_dir=output_dir,
        train_loss=finite(train_loss),
        steps=steps,
        train_seconds=round(train_seconds, 3),
        samples_per_second=round(samples_seen / train_seconds, 3) if train_seconds > 0 else None,
        reward_mean=mean_or_none(rewards[-REWARD_WINDOW:]),
        reward_first=mean_or_none(rewards[:REWARD_WINDOW]),
        stopped_early=stopped_early,
        lora_merged=merged or config.lora,  # a LoRA run's adapters are merged before saving, here or earlier
        device=str(where.device),
        dtype=dtype_name(where.dtype),
        extra={key: float(value) for key, value in figures.items() if value is not None},
        **timing,
    )
    shutil.rmtree(output_dir / STAGING_DIR, ignore_errors=True)
    atomic_write_json(output_dir / METRICS_FILE, result.model_dump(mode="json"))
    log(
        f"{recipe}: done, {steps} steps in {train_seconds:.1f}s on {where.describe()}, train_loss "
        f"{result.train_loss}, reward {result.reward_mean}; checkpoint in {output_dir}"
    )
    return result


def finish_trl(
    run: TrainedRun,
    recipe: str,
    config: TrainerConfig,
    tokenizer: PreTrainedTokenizerBase,
    *,
    eval_before: float | None = None,
    eval_after: float | None = None,
    extra: Mapping[str, float | None] | None = None,
) -> TrainResult:
    """`finish_run` for a TRL recipe: its figures read from the trainer's state and TRL's own training loss."""
    trainer = run.trainer
    steps = int(trainer.state.global_step)
    pace = run.schedule.pace
    saving = time.monotonic()
    if not config.lora and config.save_optimizer_max_mb > 0 and trainer.optimizer is not None:
        saved = save_optimizer_state(
            trainer.optimizer,
            trainer.model,
            Path(config.output_dir),
            recipe=type(config).__name__,
            max_bytes=int(config.save_optimizer_max_mb * 2**20),
            staging_dir=Path(config.output_dir) / STAGING_DIR,
        )
        log(saved)
    pace.optimizer_save_s = time.monotonic() - saving
    batch = config.per_device_train_batch_size * int(getattr(trainer.args, "gradient_accumulation_steps", 1))
    return finish_run(
        recipe=recipe,
        config=config,
        model=trainer.model,
        tokenizer=tokenizer,
        history=list(trainer.state.log_history),
        train_seconds=run.train_seconds,
        steps=steps,
        samples_seen=steps * batch,
        stopped_early=run.schedule.stopped_early,
        train_loss=run.train_loss,
        eval_before=eval_before,
        eval_after=eval_after,
        extra=extra,
        pace=pace,
    )
