"""One pydantic config per recipe, all sharing the fields every trainer needs.

Every field carries `Field(description=...)`: the agent's LLM proposer sees a recipe through these descriptions
(agent/proposers/recipes.py), and a test holds every registered recipe to it. A recipe that only changes a default
(`max_steps: int = 400`) keeps the description its base class gave the field.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from trainers.schedule import ScheduleType, schedule_problems

Share = Annotated[float, Field(ge=0.0, lt=1.0)]  # a share of the trial, short of all of it


class TrainerConfig(BaseModel):
    """Fields every recipe understands. Files are JSONL with `prompt` and `answer` (see tasks.Sample)."""

    model_config = ConfigDict(extra="forbid")

    model_path: Path = Field(description="Hugging Face checkpoint folder to start from.")
    train_file: Path = Field(description="Training JSONL, one {prompt, answer} object per line.")
    output_dir: Path = Field(
        description="Where the checkpoint (safetensors + tokenizer), log_history.jsonl and metrics.json land."
    )
    benchmark: str = Field(default="arith", description="Benchmark whose answer checker scores rewards.")
    seed: int = Field(default=0, description="Seed for Python, NumPy and torch, and for the data order.")
    learning_rate: float = Field(default=1e-3, description="Peak learning rate of the (policy) optimizer.")
    max_steps: int | None = Field(
        default=200,
        ge=1,
        description="Optimizer steps to take (fewer if max_seconds runs out); None: as many as max_seconds allows.",
    )
    per_device_train_batch_size: int = Field(default=32, description="Training samples per optimizer step.")
    max_seconds: float | None = Field(
        default=None,
        gt=0,
        description="Wall seconds the whole trial may take, from its start (imports and loading included) to its "
        "checkpoint saved: training is timed to end so that saving fits, and a time-boxed schedule follows the "
        "seconds left for training.",
    )
    reserved_seconds: float = Field(
        default=0.0,
        ge=0.0,
        description="Seconds at the end of max_seconds kept for the host's work on the checkpoint (its validation); "
        "set by the loop, not by a proposal.",
    )
    lr_scheduler_type: ScheduleType = Field(
        default="linear",
        description="How the rate moves over the trial, measured in the trial's own progress (the larger of steps "
        "done / max_steps and training seconds spent / seconds it has): linear or cosine decay to min_lr_ratio, or "
        "constant (with cooldown_ratio: warm-up, stable, then a linear cool-down). constant_with_warmup = constant.",
    )
    warmup_ratio: Share = Field(
        default=0.05,
        description="Share of the trial (of its line, with schedule_from/schedule_to) spent warming the rate up "
        "from 0 (skipped when the optimizer is continued).",
    )
    warmup_steps: int | None = Field(
        default=None,
        ge=0,
        description="Warm-up in optimizer steps instead of warmup_ratio (a time-boxed trial may not reach them); "
        "only a trial that starts its line (schedule_from 0) warms up.",
    )
    cooldown_ratio: Share = Field(
        default=0.0,
        description="constant only: the final share of the trial over which the rate falls linearly to min_lr_ratio.",
    )
    min_lr_ratio: float = Field(
        default=0.0,
        ge=0.0,
        le=1.0,
        description="Where a decay or cool-down ends, as a share of the peak rate.",
    )
    schedule_from: Share = Field(
        default=0.0,
        description="Where in its line's schedule this trial starts (0: the line's start). A line of trials, each "
        "continuing the one before (init_from, resume_optimizer), splits one schedule between them: the second of "
        "four covers 0.25 to 0.5, so the four warm up once and decay once, as one run of their total length would. "
        "warmup_ratio and cooldown_ratio are then shares of the whole line.",
    )
    schedule_to: float = Field(
        default=1.0,
        gt=0.0,
        le=1.0,
        description="Where in its line's schedule this trial ends (1: the line's end, where a decay reaches "
        "min_lr_ratio). A trial that is not the line's last stops short of the decay's end.",
    )
    max_train_samples: int | None = Field(
        default=None, description="Use only the first N samples of train_file; None uses all."
    )
    logging_steps: int = Field(default=10, description="A progress line and log-history entry every N steps.")
    lora: bool = Field(
        default=False,
        description="Train LoRA adapters on every linear layer; merged into the saved checkpoint.",
    )
    lora_r: int = Field(default=16, description="LoRA rank (with lora=true).")
    lora_alpha: int = Field(default=32, description="LoRA scaling alpha (with lora=true).")
    prompt_format: Literal["plain", "chat"] = Field(
        default="plain",
        description="plain: train on the prompts as written; chat: as the user turn of the model's chat template "
        "(what the grader scores with --prompt-format chat), SFT answers ending in its end-of-turn token.",
    )
    system_prompt: str | None = Field(
        default=None, description="chat only: a system turn before every prompt (as the grader's)."
    )
    torch_threads: int | None = Field(
        default=1,
        ge=1,
        description="CPU threads for torch; 1 is fastest for tiny models (and keeps trials that share a machine "
        "off each other's cores); None: every core the trial has (OMP_NUM_THREADS where the loop shares the "
        "machine between trials), what a pretrained model needs.",
    )
    gradient_checkpointing: bool = Field(
        default=False,
        description="Recompute activations in the backward pass: less memory for bigger models, about 30% slower.",
    )
    resume_optimizer: bool = Field(
        default=False,
        description="Starting from a checkpoint this recipe trained, continue its optimizer (Adam's moments saved "
        "with it) and skip the warm-up, as one longer run would. Off by default: a fresh optimizer re-normalises "
        "its steps, which an annealing line relied on (tiny-arith: -4 points for a 0.7x-per-trial line).",
    )
    save_optimizer_max_mb: float = Field(
        default=64.0,
        ge=0.0,
        description="Save the optimizer's moments with the checkpoint (optimizer/) when they take at most this many "
        "MiB, so a trial continued from it keeps them; 0: never (checkpoints stay weights only).",
    )
    extra: dict[str, object] = Field(
        default_factory=dict,
        description="Free-form notes carried along with the config; no recipe reads them.",
    )

    @model_validator(mode="after")
    def _schedule_can_be_followed(self) -> TrainerConfig:
        problems = schedule_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self

    @classmethod
    def __pydantic_init_subclass__(cls, **kwargs: Any) -> None:
        """A subclass that re-declares a field to change its default inherits the base class's description."""
        super().__pydantic_init_subclass__(**kwargs)
        inherited = False
        for name, info in cls.model_fields.items():
            if info.description:
                continue
            for base in cls.__mro__[1:]:
                parent = base.__dict__.get("__pydantic_fields__", {}).get(name)
                if parent is not None and parent.description:
                    info.description = parent.description
                    inherited = True
                    break
        if inherited:
            cls.model_rebuild(force=True)


class TrainRowChoices(BaseModel):
    """What a recipe that reads train rows may do to them first: the moves a researcher makes when the data are not
    what the task needs (answers written in another format, a share of them wrong). Mixed into the configs of the
    recipes that apply them (sft, grpo, opo, rft); `trainers.data.RowMoves` applies them."""

    answer_format: Literal["as_given", "final_number"] = Field(
        default="as_given",
        description="as_given: train on each answer as written; final_number: on the final number it states "
        "('#### 95', 'The answer is 95.', else its last number), for data written as sentences or worked "
        "solutions where the benchmark wants the bare number. Rows whose answer holds no number are dropped.",
    )
    filter_by_verifier: bool = Field(
        default=False,
        description="Drop train rows whose answer the benchmark's exact verifier rejects (the result computed "
        "from the prompt, as arith's), e.g. demonstrations with a share of wrong answers; rows without an answer "
        "are kept for recipes that train on prompts alone. Needs a benchmark with a verifier.",
    )
