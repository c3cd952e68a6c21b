"""Recipes run in-process on tiny-arith: time budget, LoRA merge, SFT lift and GRPO steps."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from trainers.algorithms.grpo import GRPORecipeConfig, run_grpo
from trainers.algorithms.sft import SFTRecipeConfig, run_sft
from trainers.quick_eval import checkpoint_accuracy


def test_max_seconds_stops_early_and_still_saves(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    config = SFTRecipeConfig(
        model_path=tiny_model_dir,
        train_file=arith_train_file,
        output_dir=tmp_path / "out",
        max_steps=10_000,
        per_device_train_batch_size=8,
        max_seconds=5.0,
    )
    result = run_sft(config)
    assert result.stopped_early and 0 < result.steps < 10_000
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["stopped_early"] is True and metrics["steps"] == result.steps
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")


def test_lora_checkpoint_is_merged_into_a_plain_model(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    config = SFTRecipeConfig(
        model_path=tiny_model_dir,
        train_file=arith_train_file,
        output_dir=tmp_path / "out",
        max_steps=3,
        per_device_train_batch_size=8,
        lora=True,
        lora_r=4,
        lora_alpha=8,
    )
    result = run_sft(config)
    assert result.lora_merged
    assert not (tmp_path / "out" / "adapter_config.json").exists()
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert not any("lora" in name for name, _ in model.named_parameters())


# tiny-arith's weights differ from machine to machine (torch picks CPU kernels by instruction set), and it sits
# on a plateau of its learning curve: from one build 400 SFT steps lifted valid by +0.147, from others (AVX2 kernels,
# other build seeds) by +0.003 to +0.103. 1,000 steps get every build we tried past the plateau: +0.18 (two worst
# builds) to +0.60 on all 300 valid problems. The margin keeps half of the worst lift as slack.
SFT_STEPS = 1000
SFT_MIN_LIFT = 0.10


@pytest.mark.slow
def test_sft_improves_arith_accuracy(tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path) -> None:
    before = checkpoint_accuracy(tiny_model_dir, "arith", "valid")
    result = run_sft(
        SFTRecipeConfig(
            model_path=tiny_model_dir,
            train_file=arith_train_file,
            output_dir=tmp_path / "out",
            seed=0,
            max_steps=SFT_STEPS,
        )
    )
    after = checkpoint_accuracy(tmp_path / "out", "arith", "valid")
    print(f"sft: valid accuracy {before:.3f} -> {after:.3f} in {result.train_seconds:.0f}s")
    assert after >= before + SFT_MIN_LIFT


@pytest.mark.slow
def test_grpo_runs_a_few_steps_and_saves(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    config = GRPORecipeConfig(
        model_path=tiny_model_dir,
        train_file=arith_train_file,
        output_dir=tmp_path / "out",
        max_steps=3,
        per_device_train_batch_size=16,
        num_generations=4,
        max_completion_length=6,
    )
    result = run_grpo(config)
    assert result.steps == 3
    assert result.reward_mean is not None and 0.0 <= result.reward_mean <= 1.0
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["recipe"] == "grpo" and metrics["reward_mean"] == result.reward_mean
    AutoModelForCausalLM.from_pretrained(tmp_path / "out")


def test_grpo_config_rejects_partial_groups(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="multiple of num_generations"):
        GRPORecipeConfig(
            model_path=tmp_path,
            train_file=tmp_path,
            output_dir=tmp_path,
            per_device_train_batch_size=10,
            num_generations=4,
        )
