"""One pydantic config per recipe, all sharing the fields every trainer needs."""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field


class TrainerConfig(BaseModel):
    """Fields every recipe understands. Files are JSONL with `prompt` and `answer` (see tasks.Sample)."""

    model_config = ConfigDict(extra="forbid")

    model_path: Path  # HF checkpoint folder to start from
    train_file: Path
    output_dir: Path  # the checkpoint (safetensors + tokenizer) and metrics.json land here
    benchmark: str = "arith"  # selects the reward function / answer checker
    seed: int = 0
    learning_rate: float = 1e-3
    max_steps: int = 200
    per_device_train_batch_size: int = 32
    max_seconds: float | None = None  # stop cleanly (and still save) once this much training time is spent
    max_train_samples: int | None = None
    logging_steps: int = 10
    lora: bool = False
    lora_r: int = 16
    lora_alpha: int = 32
    extra: dict[str, object] = Field(default_factory=dict)
