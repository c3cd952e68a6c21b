"""What every recipe run shares before it ends: seeding, loading (on `trainers.device`'s device and dtype), TRL
arguments, the time budget and progress lines. How a run ends (checkpoint, log history, metrics.json) is `trainers.finish`."""

from __future__ import annotations

import os
import random
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from transformers import (
    AutoTokenizer,
    PreTrainedModel,
    PreTrainedTokenizerBase,
    TrainerCallback,
    TrainerControl,
    TrainerState,
    TrainingArguments,
)

from trainers import device
from trainers.config import TrainerConfig
from trainers.optimizer_state import OPTIMIZER_DIR, SavedState, install_optimizer_state, read_optimizer_state


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
    """Prints each TRL log entry as one readable line (step, loss, lr, reward, ...), and logs the last step too:
    TRL logs every `logging_steps`, so a trial that ends between two of them would lose its final loss (and a
    short trial would draw no curve)."""

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

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        if control.should_training_stop:  # max_steps reached, or the time budget (its callback runs first)
            control.should_log = True

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
    """TrainingArguments shared by every TRL recipe: the device and dtype of `trainers.device`, no reporting, no
    intermediate checkpoints."""
    where = device.placement()
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
        "dataloader_pin_memory": where.on_gpu,
        "bf16": where.dtype == torch.bfloat16,
        "fp16": False,  # fp16 weights (RLLOOP_DTYPE=float16) train as they are: TRL's grad scaler refuses them
        "use_cpu": not where.on_gpu,
        "disable_tqdm": True,
        **(device.checkpointing_args() if config.gradient_checkpointing else {}),
    }


def load_model_and_tokenizer(model_path: Path) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The starting checkpoint on this process's device, in its dtype (`trainers.device`), and its tokenizer."""
    if not (model_path / "config.json").is_file():
        raise FileNotFoundError(
            f"model_path {model_path} is not a Hugging Face checkpoint (no config.json); "
            "point it at a folder written by save_pretrained, e.g. the base model or an earlier trial's output"
        )
    tokenizer = AutoTokenizer.from_pretrained(model_path)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    where = device.placement()
    model = device.load_causal_lm(model_path, where)
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    log(f"model on {where.describe()}" + (f" (CUDA_VISIBLE_DEVICES={visible})" if visible else ""))
    return model, tokenizer


def peft_config(config: TrainerConfig) -> Any:
    """A LoRA config on every linear layer when `config.lora`, else None."""
    if not config.lora:
        return None
    from peft import LoraConfig

    return LoraConfig(
        r=config.lora_r, lora_alpha=config.lora_alpha, target_modules="all-linear", task_type="CAUSAL_LM"
    )


def without_printer(trainer: Any) -> Any:
    """Drop the Trainer's raw dict printer: ProgressCallback prints the same figures as one readable line."""
    from transformers.trainer_callback import PrinterCallback

    trainer.remove_callback(PrinterCallback)
    return trainer


@dataclass
class TrainedRun:
    """A TRL trainer after `train()`, with what `trainers.finish.finish_trl` needs from it."""

    trainer: Any
    train_loss: float | None
    time_budget: TimeBudgetCallback
    train_seconds: float


class ContinueOptimizer(TrainerCallback):  # type: ignore[misc]
    """Installs the starting checkpoint's optimizer moments once the trainer has built its optimizer."""

    def __init__(self, model: torch.nn.Module, saved: SavedState) -> None:
        self.model, self.saved = model, saved

    def on_train_begin(
        self,
        args: TrainingArguments,
        state: TrainerState,
        control: TrainerControl,
        optimizer: Any = None,
        **_: Any,
    ) -> None:
        install_optimizer_state(optimizer, self.model, self.saved)


def continued_optimizer(config: TrainerConfig, trainer_kwargs: dict[str, Any]) -> ContinueOptimizer | None:
    """With `resume_optimizer`, the callback that continues the starting checkpoint's optimizer (the warm-up in
    `trainer_kwargs['args']` set to 0 steps), or None for a fresh optimizer; the log says which and why."""
    model, args = trainer_kwargs.get("model"), trainer_kwargs.get("args")
    if not config.resume_optimizer or config.lora or not isinstance(model, torch.nn.Module) or args is None:
        return None
    if not (Path(config.model_path) / OPTIMIZER_DIR).exists():
        return None
    saved = read_optimizer_state(config.model_path, model, recipe=type(config).__name__)
    if isinstance(saved, str):
        log(f"fresh optimizer: {saved}")
        return None
    args.warmup_steps = 0
    log(f"continuing the starting checkpoint's optimizer (Adam's moments at step {saved.step}); no warm-up")
    return ContinueOptimizer(model, saved)


def train_trl(trainer_class: Any, config: TrainerConfig, **trainer_kwargs: Any) -> TrainedRun:
    """Build a TRL trainer with the run's time budget, progress lines and PEFT config, and train it (continuing
    the starting checkpoint's optimizer where `trainers.optimizer_state` allows)."""
    time_budget = TimeBudgetCallback(config.max_seconds)
    continued = continued_optimizer(config, trainer_kwargs)
    callbacks = [time_budget, ProgressCallback(), *([continued] if continued else [])]
    trainer = trainer_class(peft_config=peft_config(config), callbacks=callbacks, **trainer_kwargs)
    without_printer(trainer)
    started = time.monotonic()
    output = trainer.train()
    return TrainedRun(trainer, output.training_loss, time_budget, time.monotonic() - started)
