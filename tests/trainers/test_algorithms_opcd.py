"""OPCD (on-policy, top-k reverse KL) and its off-policy baseline shrink the KL to the context-reading teacher."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors import safe_open
from transformers import AutoModelForCausalLM

from tests.trainers.tiny_policy import logged_history, tiny_policy_root
from trainers.algorithms.opcd import OPCDConfig, OPCDOffPolicyConfig, run, run_offpolicy
from trainers.experience import ContextError


def _config(cls: type[OPCDConfig], root: Path, out: Path, **extra: object) -> OPCDConfig:
    """A small, fast config; `extra` overrides any field."""
    fields: dict[str, object] = {
        "model_path": root / "model",
        "train_file": root / "train64.jsonl",
        "output_dir": out,
        "learning_rate": 1e-3,
        "max_steps": 15,
        "per_device_train_batch_size": 32,
        "num_generations": 1,
        "logging_steps": 1,
        "top_k": 16,
        "context": "Add or subtract.",
    }
    fields.update(extra)
    return cls.model_validate(fields)


def _kl_curve(out: Path) -> tuple[float, float]:
    kls = [row["kl"] for row in logged_history(out)]
    return sum(kls[:3]) / 3, sum(kls[-3:]) / 3


def test_missing_context_is_a_clear_error(tmp_path: Path) -> None:
    config = OPCDConfig(model_path=tmp_path, train_file=tmp_path / "t.jsonl", output_dir=tmp_path / "o")
    with pytest.raises(ContextError, match="set `context`"):
        run(config)


@pytest.mark.slow
def test_opcd_on_policy_reduces_reverse_kl(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    experience = tmp_path / "experience.json"
    experience.write_text(json.dumps({"experience": ["Write the number."]}))
    run(_config(OPCDConfig, tiny_policy_root(), tmp_path / "out", context=None, context_file=experience))
    first, last = _kl_curve(tmp_path / "out")
    assert last < 0.5 * first, (first, last)
    assert (tmp_path / "out" / "metrics.json").is_file()


@pytest.mark.slow
def test_opcd_offpolicy_reduces_forward_kl(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    config = _config(OPCDOffPolicyConfig, tiny_policy_root(), tmp_path / "out")
    assert isinstance(config, OPCDOffPolicyConfig)
    result = run_offpolicy(config)
    first, last = _kl_curve(tmp_path / "out")
    assert result.recipe == "opcd_offpolicy" and result.steps == 15
    assert last < 0.5 * first, (first, last)


@pytest.mark.slow
def test_opcd_with_lora_saves_merged_weights(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    root = tiny_policy_root()
    out = tmp_path / "out"
    result = run(
        _config(
            OPCDConfig,
            root,
            out,
            lora=True,
            lora_r=8,
            lora_alpha=16,
            max_steps=12,
            learning_rate=1e-2,
            renormalise=True,
        )
    )
    first, last = _kl_curve(out)
    assert last < first and result.lora_merged
    with safe_open(str(out / "model.safetensors"), "pt") as handle:
        keys = list(handle.keys())
    assert keys and not any("lora" in k for k in keys)
    merged = AutoModelForCausalLM.from_pretrained(out)
    base = AutoModelForCausalLM.from_pretrained(root / "model")
    changed = any(
        not torch.equal(a, b)
        for a, b in zip(merged.state_dict().values(), base.state_dict().values(), strict=True)
    )
    assert changed, "LoRA training left the merged weights identical to the base model"
