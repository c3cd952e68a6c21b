"""Recipe defaults that fit the base model, decided in one place, with the reason.

The recipes' own defaults (sft: learning rate 1e-3, 64 rows a step, 256 tokens, one thread) were tuned on the models
rlloop builds itself (tiny-arith, 0.34M parameters): the research ladder's figures depend on them, so a model built
here (it carries `rlloop_model.json`), or any model this small, keeps them exactly. They ruin a pretrained model:
SFT at 1e-3 on SmolLM2-135M-Instruct made 3 optimizer steps in a 150-s trial (64 rows a step on one thread) and
scored nothing, while SFT at 5e-5, 8 rows a step, two threads took it from 0.01 to 0.40 on arith's valid split in
60 steps. So a pretrained model gets:

- every rate a twentieth of the recipe's own (sft 1e-3 -> 5e-5, the rate of that run; TRL's SFT default is 2e-5, its
  DPO and GRPO defaults 1e-6: the RL recipes' rates fall by the same factor, dpo 5e-5 -> 2.5e-6, grpo 2e-4 -> 1e-5);
- 8 rows a supervised step, 16 completions (4 per prompt) an on-policy step, 16 prompts a sampling round: about 5 s a
  step for 134.5M parameters on two cores (measured 2026-12-07, fp32; bf16 autocast on this CPU was 5x slower);
- 512 tokens a sequence (a chat template's system turn and a worked solution fit);
- torch on every core the trial has (`torch_threads: None`) instead of one;
- trials of up to `PRETRAINED_TRIAL_SECONDS` when the run leaves their length to the proposer: start-up alone is ~20 s.
"""

from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUILT_HERE_FILE = (
    "rlloop_model.json"  # trainers.tiny and trainers.tiny_chat write it into every model they build
)
SMALL_PARAMETERS = 20_000_000  # below this the recipes' own defaults stand, whoever built the model
PRETRAINED_LR_SCALE = 0.05
PRETRAINED_BATCH = 8
PRETRAINED_ONPOLICY_BATCH = 16
PRETRAINED_GENERATIONS = 4
PRETRAINED_PROMPTS_PER_ROUND = 16
PRETRAINED_MAX_LENGTH = 512
PRETRAINED_TRIAL_SECONDS = 240.0


def count_parameters(folder: Path) -> int | None:
    """Parameters in the folder's safetensors files, from their headers alone (no tensor read; a tied weight is
    stored once); None when it holds none."""
    index = folder / "model.safetensors.index.json"
    if index.is_file():
        files = sorted(set(json.loads(index.read_text())["weight_map"].values()))
    else:
        files = [p.name for p in sorted(folder.glob("*.safetensors"))]
    if not files:
        return None
    total = 0
    for name in files:
        with (folder / name).open("rb") as handle:
            (size,) = struct.unpack("<Q", handle.read(8))
            header = json.loads(handle.read(size))
        total += sum(math.prod(t["shape"]) for key, t in header.items() if key != "__metadata__")
    return total


@dataclass(frozen=True)
class ModelFit:
    """What the base model is, and the recipe defaults that follow from it (none: the recipes' own)."""

    kind: str  # "built here", "small" or "pretrained"
    parameters: int | None
    reason: str
    pretrained: bool = False
    max_trial_seconds: float | None = None  # the longest trial the proposer gives when the run leaves it open
    _cache: dict[str, dict[str, Any]] = field(default_factory=dict, compare=False, repr=False)

    def defaults(self, recipe: str) -> dict[str, Any]:
        """The fields of `recipe`'s config whose default this model changes, with their values (empty: none)."""
        if not self.pretrained:
            return {}
        if recipe not in self._cache:
            from trainers.registry import get_recipe

            self._cache[recipe] = pretrained_defaults(get_recipe(recipe).config_class.model_fields)
        return dict(self._cache[recipe])

    def summary(self, recipes: list[str], shown: int = 2) -> str:
        """One line for run.log: the changed defaults of the first `shown` of `recipes`, the rest counted."""
        if not self.pretrained:
            return f"{self.reason}: the recipes' own defaults"
        parts = []
        changed = [r for r in recipes if self.defaults(r)]
        for recipe in changed[:shown]:
            parts.append(
                f"{recipe} " + ", ".join(f"{k}={_text(v)}" for k, v in self.defaults(recipe).items())
            )
        if len(changed) > shown:
            parts.append(
                f"{len(changed) - shown} more recipes likewise (each trial's config.json has its own)"
            )
        return f"{self.reason}: " + "; ".join(parts)


def _text(value: Any) -> str:
    if value is None:
        return "all cores"
    return f"{value:.3g}" if isinstance(value, float) else str(value)


def pretrained_defaults(fields: dict[str, Any]) -> dict[str, Any]:
    """A pretrained model's defaults for a config class with these pydantic `fields`."""

    def default(name: str) -> Any:
        info = fields.get(name)
        return None if info is None or info.is_required() else info.get_default(call_default_factory=True)

    changed: dict[str, Any] = {}
    for name in fields:
        value = default(name)
        if name.endswith("learning_rate") and isinstance(value, float):
            changed[name] = float(f"{value * PRETRAINED_LR_SCALE:.3g}")
    batch = default("per_device_train_batch_size")
    generations = default("num_generations")
    if isinstance(generations, int) and isinstance(batch, int):  # on-policy: completions a step
        group = min(generations, PRETRAINED_GENERATIONS)
        per_step = max(group, min(batch, PRETRAINED_ONPOLICY_BATCH) // group * group)
        if group != generations:
            changed["num_generations"] = group
        if per_step != batch:
            changed["per_device_train_batch_size"] = per_step
    elif isinstance(batch, int) and batch > PRETRAINED_BATCH:
        changed["per_device_train_batch_size"] = PRETRAINED_BATCH
    rounds = default("prompts_per_round")
    if isinstance(rounds, int) and rounds > PRETRAINED_PROMPTS_PER_ROUND:
        changed["prompts_per_round"] = PRETRAINED_PROMPTS_PER_ROUND
    length = default("max_length")
    if isinstance(length, int) and length < PRETRAINED_MAX_LENGTH:
        changed["max_length"] = PRETRAINED_MAX_LENGTH
    if "torch_threads" in fields and default("torch_threads") is not None:
        changed["torch_threads"] = None
    return changed


def fit_for(folder: Path) -> ModelFit:
    """The fit of the base model in `folder`."""
    parameters = count_parameters(folder)
    size = "unknown size" if parameters is None else f"{parameters / 1e6:.1f}M parameters"
    if (folder / BUILT_HERE_FILE).is_file():
        return ModelFit("built here", parameters, f"built by rlloop ({size})")
    if parameters is None or parameters < SMALL_PARAMETERS:
        return ModelFit(
            "small",
            parameters,
            f"{size}, under {SMALL_PARAMETERS / 1e6:.0f}M (the recipes' defaults are for this)",
        )
    return ModelFit(
        "pretrained",
        parameters,
        f"a pretrained model of {size}: rates a twentieth of the recipes' own (TRL's SFT default is 2e-5), small "
        "batches, every core (trainers/model_fit.py)",
        pretrained=True,
        max_trial_seconds=PRETRAINED_TRIAL_SECONDS,
    )
