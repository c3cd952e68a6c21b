"""The one place a recipe's device and dtype are chosen: CUDA in bf16 where the GPU supports it, else CPU in fp32.

Every recipe loads its models through `load_causal_lm` / `load_model` (TRL-backed and hand-written alike), so a
trial given a GPU (`rlloop run --trial-gpus N` sets its CUDA_VISIBLE_DEVICES) trains there, and the CPU tests run
the very same path with device `cpu`. `RLLOOP_DEVICE` (auto, cpu, cuda, cuda:1) and `RLLOOP_DTYPE` (auto,
bfloat16, float16, float32) override the choice; `trainers.finish` records the device and dtype the trained
weights were really on in metrics.json, so a bypass shows.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

DEVICE_ENV = "RLLOOP_DEVICE"
DTYPE_ENV = "RLLOOP_DTYPE"
DTYPES = {"bfloat16": torch.bfloat16, "float16": torch.float16, "float32": torch.float32}
DTYPE_ALIASES = {
    "bf16": "bfloat16",
    "fp16": "float16",
    "half": "float16",
    "fp32": "float32",
    "float": "float32",
}


class DeviceChoiceError(ValueError):
    """RLLOOP_DEVICE or RLLOOP_DTYPE names something this machine cannot use; the message says what to set."""


def pick_device(requested: str | None = None) -> torch.device:
    """`requested` (else RLLOOP_DEVICE, else auto): auto is the first visible CUDA device when there is one."""
    name = (requested or os.environ.get(DEVICE_ENV) or "auto").strip().lower()
    if name == "auto":
        return torch.device("cuda:0" if torch.cuda.is_available() else "cpu")
    try:
        device = torch.device(name)
    except RuntimeError:
        raise DeviceChoiceError(
            f"{DEVICE_ENV}={name!r} is not a device; use auto, cpu, cuda or cuda:N"
        ) from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise DeviceChoiceError(
                f"{DEVICE_ENV}={name!r} but torch sees no CUDA device (CUDA_VISIBLE_DEVICES="
                f"{os.environ.get('CUDA_VISIBLE_DEVICES', '<unset>')!r}, torch {torch.__version__}); "
                f"use {DEVICE_ENV}=cpu or run on a GPU"
            )
        index = device.index or 0
        if index >= torch.cuda.device_count():
            raise DeviceChoiceError(
                f"{DEVICE_ENV}={name!r} but only {torch.cuda.device_count()} CUDA device(s) are visible"
            )
        return torch.device("cuda", index)
    if device.type != "cpu":
        raise DeviceChoiceError(f"{DEVICE_ENV}={name!r}: rlloop trains on cpu or cuda only")
    return device


def pick_dtype(device: torch.device, requested: str | None = None) -> torch.dtype:
    """`requested` (else RLLOOP_DTYPE, else auto): auto is bf16 on a CUDA device that supports it, else fp32."""
    name = (requested or os.environ.get(DTYPE_ENV) or "auto").strip().lower()
    name = DTYPE_ALIASES.get(name, name)
    if name == "auto":
        if device.type == "cuda" and torch.cuda.is_bf16_supported():
            return torch.bfloat16
        return torch.float32
    if name not in DTYPES:
        raise DeviceChoiceError(
            f"{DTYPE_ENV}={name!r} is not a dtype; use auto, bfloat16, float16 or float32"
        )
    return DTYPES[name]


@dataclass(frozen=True)
class Placement:
    """Where a recipe's models live and in which dtype their weights are held."""

    device: torch.device
    dtype: torch.dtype

    @property
    def on_gpu(self) -> bool:
        return self.device.type == "cuda"

    def describe(self) -> str:
        return f"{self.device} {dtype_name(self.dtype)}"


def placement() -> Placement:
    """This process's device and dtype (see pick_device / pick_dtype)."""
    device = pick_device()
    return Placement(device, pick_dtype(device))


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def load_model(model_class: Any, path: Path | str, where: Placement | None = None, **kwargs: Any) -> Any:
    """`model_class.from_pretrained(path)` in this process's dtype, moved to its device."""
    where = where or placement()
    model = model_class.from_pretrained(path, dtype=where.dtype, **kwargs)
    return model.to(where.device)


def load_causal_lm(path: Path | str, where: Placement | None = None) -> Any:
    from transformers import AutoModelForCausalLM

    return load_model(AutoModelForCausalLM, path, where)


def model_placement(model: torch.nn.Module) -> Placement:
    """Where `model`'s weights really are (its first parameter): what metrics.json records."""
    first = next(model.parameters())
    return Placement(first.device, first.dtype)


def _checkpointing_name() -> str:
    """transformers 5.x renamed gradient checkpointing to activation checkpointing (the old name warns)."""
    import dataclasses

    from transformers import TrainingArguments

    names = {f.name for f in dataclasses.fields(TrainingArguments)}
    return "activation_checkpointing" if "activation_checkpointing" in names else "gradient_checkpointing"


def checkpointing_args() -> dict[str, Any]:
    """TrainingArguments that turn on non-reentrant gradient checkpointing (LoRA's frozen inputs need it)."""
    name = _checkpointing_name()
    return {name: True, f"{name}_kwargs": {"use_reentrant": False}}


def enable_gradient_checkpointing(model: Any) -> None:
    """Recompute activations in the backward pass (less memory); non-reentrant, so LoRA's frozen inputs work."""
    name = _checkpointing_name()
    getattr(model, f"{name}_enable")(**{f"{name}_kwargs": {"use_reentrant": False}})
    model.config.use_cache = False
