"""What a finished training run reports: the figures `metrics.json` holds and the loop records."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, Field


class TrainResult(BaseModel):
    """Outcome of one recipe run. `metrics.json` in `output_dir` is this model dumped, written last."""

    recipe: str
    output_dir: Path
    train_loss: float | None = None  # mean training loss over the run (TRL's `train_loss`)
    steps: int = 0  # optimizer steps actually taken
    train_seconds: float = 0.0
    samples_per_second: float | None = None
    reward_mean: float | None = None  # RL recipes: mean reward over the last logged window
    reward_first: float | None = (
        None  # RL recipes: mean reward of the first logged window, to see whether it rose
    )
    stopped_early: bool = False  # True when `max_seconds` ran out before `max_steps`
    lora_merged: bool = False
    extra: dict[str, float] = Field(default_factory=dict)


class TrainerSetupError(RuntimeError):
    """The trial cannot start as configured (a missing endpoint, no GPU for vLLM): the CLI prints one line, exit 2."""
