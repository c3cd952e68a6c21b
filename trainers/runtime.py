"""What every recipe run shares: seeding, CPU-friendly TRL arguments, the time budget, progress lines, and saving.

Saving is the part that must never go wrong: the checkpoint is written into `output_dir/.tmp`, moved into place file by
file, and `metrics.json` is written last (atomically). A run killed at any point leaves no `metrics.json`, so nobody
mistakes a half-written checkpoint for a finished one.
"""

from __future__ import annotations

import json
import math
import os
import random
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoModelForCausalLM,
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from trainers.config import TrainerConfig
from trainers.result import TrainResult

METRICS_FILE = "metrics.json"
LOG_HISTORY_FILE = "log_history.jsonl"
STAGING_DIR = ".tmp"


def seed_everything(seed: int) -> None:
    """Python, NumPy (if present) and torch RNGs, so a run with the same config repeats."""
    quiet_libraries()
    random.seed(seed)
    try:
        import numpy as np

        np.random.seed(seed)
    except ImportError:  # pragma: no cover - numpy ships with torch
        pass
    torch.manual_seed(seed)


def quiet_libraries() -> None:
    """Our progress lines are the trial log; silence datasets/transformers progress bars that would bury them."""
    import datasets
    from transformers.utils import logging as hf_logging

    datasets.disable_progress_bars()
    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()


def log(message: str) -> None:
    """One progress line on stdout: the trial log a person watches."""
    print(f"[trainers] {message}", flush=True)


class TimeBudgetCallback(TrainerCallback):  # type: ignore[misc]
    """Stops training cleanly once `max_seconds` of training time is spent; the final checkpoint is still saved."""

    def __init__(self, max_seconds: float | None) -> None:
        self.max_seconds = max_seconds
        self.started = time.monotonic()
        self.stopped_early = False

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self.started = time.monotonic()

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if self.max_seconds is None or control.should_training_stop:
            return
        elapsed = time.monotonic() - self.started
        if elapsed >= self.max_seconds and state.global_step < state.max_steps:
            self.stopped_early = True
            control.should_training_stop = True
            log(
                f"time budget of {self.max_seconds:.0f}s spent at step {state.global_step}; stopping and saving"
            )


class ProgressCallback(TrainerCallback):  # type: ignore[misc]
    """Prints each TRL log entry as one readable line (step, loss, lr, reward, ...)."""

    _KEYS = (
        "loss",
        "reward",
        "reward_std",
        "kl",
        "learning_rate",
        "grad_norm",
        "mean_token_accuracy",
        "entropy",
    )

    def on_log(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        logs: dict[str, Any] | None = None,
        **_: Any,
    ) -> None:
        if not logs or "train_runtime" in logs:
            return
        parts = [f"step {state.global_step}/{state.max_steps}"]
        for key in self._KEYS:
            value = logs.get(key)
            if isinstance(value, int | float):
                parts.append(f"{key} {value:.4g}")
        log(" ".join(parts))


def base_training_args(config: TrainerConfig, staging: Path) -> dict[str, Any]:
    """TrainingArguments shared by every TRL recipe: CPU-safe, no reporting, no intermediate checkpoints."""
    on_gpu = torch.cuda.is_available()
    return {
        "output_dir": str(staging / "trainer"),
        "seed": config.seed,
        "data_seed": config.seed,
        "learning_rate": config.learning_rate,
        "max_steps": config.max_steps,
        "per_device_train_batch_size": config.per_device_train_batch_size,
        "logging_steps": config.logging_steps,
        "logging_first_step": True,
        "save_strategy": "no",
        "report_to": "none",
        "dataloader_num_workers": 0,
        "dataloader_pin_memory": on_gpu,
        "bf16": on_gpu and torch.cuda.is_bf16_supported(),
        "fp16": False,
        "use_cpu": not on_gpu,
        "disable_tqdm": True,
    }


def prepare_output_dir(output_dir: Path) -> Path:
    """Create `output_dir`, drop a stale `metrics.json` (this run is not finished yet) and return a fresh staging dir."""
    output_dir.mkdir(parents=True, exist_ok=True)
    (output_dir / METRICS_FILE).unlink(missing_ok=True)
    staging = output_dir / STAGING_DIR
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    return staging


def load_model_and_tokenizer(model_path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The starting checkpoint, in float32 on CPU (TRL moves it to the accelerator when there is one)."""
    if not (model_path / "config.json").is_file():
        raise FileNotFoundError(
            f"model_path {model_path} is not a Hugging Face checkpoint (no config.json); "
            "point it at a folder written by save_pretrained, e.g. the base model or an earlier trial's output"
        )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    model = AutoModelForCausalLM.from_pretrained(model_path, dtype=torch.float32)
    return model, tokenizer


def peft_config(config: TrainerConfig) -> Any:
    """A LoRA config on every linear layer when `config.lora`, else None."""
    if not config.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def plain_model(model: Any) -> tuple[PreTrainedModel, bool]:
    """The model to save: LoRA adapters merged in, so the grader loads an ordinary checkpoint."""
    if hasattr(model, "merge_and_unload"):
        return model.merge_and_unload(), True
    return model, False


def _write_json_atomically(path: Path, payload: Any) -> None:
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(json.dumps(payload, indent=2, default=str) + "\n")
    os.replace(tmp, path)


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


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and math.isfinite(value) else None


def _window_mean(history: Iterable[dict[str, Any]], key: str, *, last: bool) -> float | None:
    values = [float(entry[key]) for entry in history if isinstance(entry.get(key), int | float)]
    if not values:
        return None
    return values[-1] if last else values[0]


def without_printer(trainer: Any) -> Any:
    """Drop the Trainer's raw dict printer: ProgressCallback prints the same figures as one readable line."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


def finish_run(
    *,
    recipe: str,
    config: TrainerConfig,
    trainer: Any,
    train_loss: float | None,
    time_budget: TimeBudgetCallback,
    train_seconds: float,
    tokenizer: PreTrainedTokenizerBase,
) -> TrainResult:
    """Save the final model, the log history and (last) `metrics.json`; return the run's result."""
    output_dir = config.output_dir
    model, merged = plain_model(trainer.model)
    save_checkpoint(model.cpu(), tokenizer, output_dir)
    history: list[dict[str, Any]] = list(trainer.state.log_history)
    with (output_dir / LOG_HISTORY_FILE).open("w") as fh:
        for entry in history:
            fh.write(json.dumps(entry, default=str) + "\n")
    steps = int(trainer.state.global_step)
    batch = config.per_device_train_batch_size * int(getattr(trainer.args, "gradient_accumulation_steps", 1))
    result = TrainResult(
        recipe=recipe,
        output_dir=output_dir,
        train_loss=_finite(train_loss),
        steps=steps,
        train_seconds=round(train_seconds, 3),
        samples_per_second=round(steps * batch / train_seconds, 3) if train_seconds > 0 else None,
        reward_mean=_window_mean(history, "reward", last=True),
        reward_first=_window_mean(history, "reward", last=False),
        stopped_early=time_budget.stopped_early,
        lora_merged=merged,
    )
    shutil.rmtree(output_dir / STAGING_DIR, ignore_errors=True)
    _write_json_atomically(output_dir / METRICS_FILE, result.model_dump(mode="json"))
    log(
        f"done: {steps} steps in {train_seconds:.1f}s, train_loss {result.train_loss}, "
        f"reward {result.reward_mean}; checkpoint in {output_dir}"
    )
    return result


@dataclass
class TrainedRun:
    """A TRL trainer after `train()`, with what `finish_run` needs from it."""

    trainer: Any
    train_loss: float | None
    time_budget: TimeBudgetCallback
    train_seconds: float

    def finish(self, recipe: str, config: TrainerConfig, tokenizer: PreTrainedTokenizerBase) -> TrainResult:
        return finish_run(
            recipe=recipe,
            config=config,
            trainer=self.trainer,
            train_loss=self.train_loss,
            time_budget=self.time_budget,
            train_seconds=self.train_seconds,
            tokenizer=tokenizer,
        )


def train_trl(trainer_class: Any, config: TrainerConfig, **trainer_kwargs: Any) -> TrainedRun:
    """Build a TRL trainer with the run's time budget, progress lines and PEFT config, and train it."""
    time_budget = TimeBudgetCallback(config.max_seconds)
    trainer = trainer_class(
        peft_config=peft_config(config), callbacks=[time_budget, ProgressCallback()], **trainer_kwargs
    )
    without_printer(trainer)
    started = time.monotonic()
    output = trainer.train()
    return TrainedRun(trainer, output.training_loss, time_budget, time.monotonic() - started)
