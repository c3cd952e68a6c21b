"""What a finished training run reports: the figures `metrics.json` holds and the loop records."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field

REWARD_WINDOW = 5  # logged steps averaged into reward_first / reward_mean: a single sampled step is noisy


class TrainResult(BaseModel):
    """Outcome of one recipe run. `metrics.json` in `output_dir` is this model dumped, written last.

    Every figure has one meaning for every recipe (`trainers.finish.finish_run` computes them all). A "logged step"
    is an entry of `log_history.jsonl` that carries the figure: TRL's log entries (every `logging_steps`), one row
    per step in the hand-written loops, one row per round in `oel`.
    """

    recipe: str
    output_dir: Path
    train_loss: float | None = Field(
        default=None, description="Mean training loss over the run's steps (the recipe's objective, e.g. KL)."
    )
    steps: int = Field(default=0, description="Optimizer steps actually taken.")
    train_seconds: float = Field(default=0.0, description="Wall time of training, final evaluation excluded.")
    startup_seconds: float | None = Field(
        default=None,
        description="From the trial's start (the host's launch) to its first training step: imports, data, model "
        "load, evaluation before training.",
    )
    startup_parts: dict[str, float] = Field(
        default_factory=dict,
        description="Where startup_seconds went, in order: launch (sandbox and interpreter), imports, model, data, "
        "other.",
    )
    save_seconds: float | None = Field(
        default=None, description="Writing the checkpoint (and optimizer state)."
    )
    wall_seconds: float | None = Field(
        default=None,
        description="From the trial's start to its checkpoint saved: what the trial cost in time.",
    )
    schedule_progress: float | None = Field(
        default=None,
        description="How far through its learning-rate schedule the trial got (1: to its end; less: the rate "
        "never reached where the schedule ends, e.g. a warm-up or decay longer than the trial).",
    )
    line_progress: float | None = Field(
        default=None,
        description="For a trial that covers a part of its line's schedule (schedule_from, schedule_to): how far "
        "through the line's schedule it got.",
    )
    lr_last: float | None = Field(default=None, description="The learning rate of the last step taken.")
    samples_per_second: float | None = Field(
        default=None, description="Training samples (completions, pairs) consumed per second of training."
    )
    reward_mean: float | None = Field(
        default=None, description=f"RL recipes: mean reward over the last {REWARD_WINDOW} logged steps."
    )
    reward_first: float | None = Field(
        default=None,
        description=f"RL recipes: mean reward over the first {REWARD_WINDOW} logged steps, to see whether it rose.",
    )
    stopped_early: bool = Field(
        default=False, description="True when `max_seconds` ran out before the last step."
    )
    lora_merged: bool = Field(
        default=False, description="True when LoRA adapters were merged into the checkpoint."
    )
    device: str | None = Field(
        default=None, description="Where the trained weights were (cpu, cuda:0): trainers.device's choice."
    )
    dtype: str | None = Field(
        default=None, description="The dtype the trained weights were held in (bfloat16, float32)."
    )
    extra: dict[str, float] = Field(
        default_factory=dict,
        description=(
            "Recipe-specific figures, plus the shared ones where they apply: train_tokens (prompt and completion "
            "tokens processed), tokens_per_second (train_tokens / train_seconds), eval_accuracy_before and "
            "eval_accuracy (greedy accuracy on `eval_file` before and after training)."
        ),
    )


class TrainerSetupError(RuntimeError):
    """The trial cannot start as configured (a missing endpoint, no GPU for vLLM): the CLI prints one line, exit 2."""
