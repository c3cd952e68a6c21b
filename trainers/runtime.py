"""What every recipe run shares before it ends: seeding, loading (on `trainers.device`'s device and dtype), TRL
arguments, the trial's clock and schedule (`Pace`) and progress lines. How a run ends (checkpoint, log history, metrics.json) is `trainers.finish`."""

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
from trainers.schedule import SAVE_FIXED_S, LearningRate, TrialClock, mark, save_seconds

UNBOUNDED_STEPS = 10**9
# a step is not started unless the longest of the last this-many steps still fits what is left of the window
STEP_ESTIMATE_OF = 3  # TRL needs a step count; a trial bounded by max_seconds alone ends by its clock


def seed_everything(seed: int) -> None:
    """Python, NumPy (if present) and torch RNGs, so a run with the same config repeats. Every recipe calls it
    once its imports are done: the start-up's `imports` part ends here."""
    mark("imports")
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


def use_threads(threads: int | None) -> None:
    """Train on `threads` CPU threads; None leaves torch its own count (OMP_NUM_THREADS, else the cores it sees)."""
    if threads is not None:
        torch.set_num_threads(threads)


def log(message: str) -> None:
    """One progress line on stdout: the trial log a person watches."""
    print(f"[trainers] {message}", flush=True)


class ScheduleCallback(TrainerCallback):  # type: ignore[misc]
    """The trial's clock and learning rate for a TRL trainer: the training window opens at `on_train_begin`, the
    rate is set from the trial's progress before every optimizer step (TRL's own scheduler is constant and only
    reports it), and training stops cleanly once the window's seconds are spent; the checkpoint is still saved."""

    def __init__(self, config: TrainerConfig) -> None:
        self.pace = Pace(config)
        self.stopped_early = False

    def on_train_begin(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        self.pace.begin_training(kwargs.get("model"))

    def on_pre_optimizer_step(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **kwargs: Any
    ) -> None:
        optimizer = kwargs.get("optimizer")
        if optimizer is None:
            return
        self.pace.rate.apply(state.global_step, optimizer)
        self.pace.steps = state.global_step + 1
        scheduler = kwargs.get("lr_scheduler")
        if scheduler is not None:  # what the Trainer logs as learning_rate
            scheduler._last_lr = [group["lr"] for group in optimizer.param_groups]

    def on_step_end(
        self, args: TrainingArguments, state: TrainerState, control: TrainerControl, **_: Any
    ) -> None:
        self.pace.step_boundary()
        if control.should_training_stop or not self.pace.expired_at(state.global_step):
            return
        control.should_training_stop = True
        if self.pace.clock.max_steps is None or state.global_step < self.pace.clock.max_steps:
            self.stopped_early = self.pace.clock.max_steps is not None
            log(
                f"{self.pace.why_stopped(state.global_step)} (learning rate at {self.pace.rate.last_factor:.3f} of "
                "its peak); stopping and saving"
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
        bounded = state.max_steps < UNBOUNDED_STEPS
        parts = [f"step {state.global_step}/{state.max_steps}" if bounded else f"step {state.global_step}"]
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
        "max_steps": config.max_steps or UNBOUNDED_STEPS,
        # the rate follows the trial's own progress (ScheduleCallback); TRL's scheduler stays constant
        "lr_scheduler_type": "constant",
        "warmup_steps": 0,
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


def steps_text(config: TrainerConfig) -> str:
    """How long the trial will train, for its first log line."""
    steps = f"up to {config.max_steps} steps" if config.max_steps is not None else ""
    seconds = f"{config.max_seconds:g} wall seconds" if config.max_seconds is not None else ""
    return " within ".join(part for part in (steps, seconds) if part)


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
    mark("model")
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
    schedule: ScheduleCallback
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


def continued_optimizer(
    config: TrainerConfig, trainer_kwargs: dict[str, Any], schedule: ScheduleCallback
) -> ContinueOptimizer | None:
    """With `resume_optimizer`, the callback that continues the starting checkpoint's optimizer (the schedule's
    warm-up skipped: the moments are warm already), or None for a fresh optimizer; the log says which and why."""
    model = trainer_kwargs.get("model")
    if not config.resume_optimizer or config.lora or not isinstance(model, torch.nn.Module):
        return None
    if not (Path(config.model_path) / OPTIMIZER_DIR).exists():
        return None
    saved = read_optimizer_state(config.model_path, model, recipe=type(config).__name__)
    if isinstance(saved, str):
        log(f"fresh optimizer: {saved}")
        return None
    schedule.pace.rate.skip_warmup = True
    log(f"continuing the starting checkpoint's optimizer (Adam's moments at step {saved.step}); no warm-up")
    return ContinueOptimizer(model, saved)


def train_trl(trainer_class: Any, config: TrainerConfig, **trainer_kwargs: Any) -> TrainedRun:
    """Build a TRL trainer with the trial's clock and schedule, progress lines and PEFT config, and train it
    (continuing the starting checkpoint's optimizer where `trainers.optimizer_state` allows)."""
    schedule = ScheduleCallback(config)
    continued = continued_optimizer(config, trainer_kwargs, schedule)
    # the schedule first: its rate is set before the continued optimizer's moments are installed, and its stop
    # decision is made before ProgressCallback asks whether this step is the last
    callbacks = [schedule, ProgressCallback(), *([continued] if continued else [])]
    trainer = trainer_class(peft_config=peft_config(config), callbacks=callbacks, **trainer_kwargs)
    without_printer(trainer)
    started = time.monotonic()
    output = trainer.train()
    return TrainedRun(trainer, output.training_loss, schedule, time.monotonic() - started)


class Pace:
    """One trial's clock (`trainers.schedule.TrialClock`) and learning rate, from its config. A hand-written loop
    calls `begin_step(*optimizers)` before each optimizer step (False: the trial must stop now)."""

    def __init__(self, config: TrainerConfig, planned_steps: int | None = None) -> None:
        steps = config.max_steps if planned_steps is None else planned_steps
        self.clock = TrialClock(config.max_seconds, steps, reserved_seconds=config.reserved_seconds)
        self.rate = LearningRate(
            self.clock,
            kind=config.lr_scheduler_type,
            warmup_ratio=config.warmup_ratio,
            warmup_steps=config.warmup_steps,
            cooldown_ratio=config.cooldown_ratio,
            min_lr_ratio=config.min_lr_ratio,
            span=(config.schedule_from, config.schedule_to),
        )
        self.steps = 0
        self.factors: list[float] = []  # each step's share of the peak rate, in order
        self.optimizer_save_s = 0.0  # saving the optimizer's moments (TRL recipes): part of save_seconds
        self.boundaries: list[float] = []  # monotonic times: the window's start, then each step's end

    def begin_training(self, model: torch.nn.Module | None) -> None:
        """Open the training window, keeping back what saving `model` will take."""
        self.clock.begin_training(save_seconds(model) if isinstance(model, torch.nn.Module) else SAVE_FIXED_S)
        self.boundaries = [time.monotonic()]

    def step_boundary(self) -> None:
        """A step ended now (a hand-written loop: the next one begins)."""
        self.boundaries.append(time.monotonic())

    def step_estimate(self) -> float:
        """Seconds the next step will take: the longest of the last `STEP_ESTIMATE_OF` steps (0 before any)."""
        recent = self.boundaries[-(STEP_ESTIMATE_OF + 1) :]
        return max((b - a for a, b in zip(recent, recent[1:], strict=False)), default=0.0)

    def next_step_fits(self) -> bool:
        """Whether one more step, as long as the recent ones, ends inside the window (always, without one)."""
        window = self.clock.window_s
        return window is None or self.clock.training_elapsed + self.step_estimate() <= window

    def expired_at(self, step: int) -> bool:
        """No step after `step`: the steps or the window are spent, or the next step would not fit the window."""
        return self.clock.expired(step) or not self.next_step_fits()

    def why_stopped(self, step: int) -> str:
        """What ended training at `step`, for the trial's log."""
        window = self.clock.window_s or 0.0
        if self.clock.expired(step):
            return f"training window of {window:.1f}s spent at step {step}"
        left = window - self.clock.training_elapsed
        return (
            f"the next step would take about {self.step_estimate():.1f}s (the longest of the last steps) and "
            f"{left:.1f}s of the {window:.1f}s training window are left, at step {step}"
        )

    def begin_step(self, *optimizers: torch.optim.Optimizer) -> bool:
        """Set the rate of the next step on `optimizers`; False once the steps or the window are spent, or the
        step would not fit what is left of the window."""
        if self.steps:
            self.step_boundary()
        if self.expired_at(self.steps):
            if self.clock.max_steps is None or self.steps < self.clock.max_steps:
                log(f"{self.why_stopped(self.steps)}; stopping and saving")
            return False
        self.factors.append(self.rate.apply(self.steps, *optimizers))
        self.steps += 1
        return True

    @property
    def elapsed(self) -> float:
        """Training seconds so far."""
        return self.clock.training_elapsed

    def expired(self) -> bool:
        """The steps or the window are spent, or the next step would not fit: no further step."""
        return self.expired_at(self.steps)

    def ran_out_of_time(self) -> bool:
        """The window's seconds ended the trial before its planned steps were done."""
        planned = self.clock.max_steps
        return planned is not None and self.steps < planned and self.expired()

    def figures(self) -> dict[str, float]:
        """metrics.json's view of the trial's time and schedule."""
        return {
            **self.rate.figures(),
            "startup_seconds": round(self.clock.startup_seconds, 3),
            **({"train_window_seconds": round(self.clock.window_s, 3)} if self.clock.window_s else {}),
        }
