"""`python -m trainers`: real subprocess runs that write loadable checkpoints, and one clear line for bad input."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.trainers.conftest import run_trainers
from trainers.registry import get_recipe, list_recipes


def test_registry_lists_core_recipes() -> None:
    names = [r.name for r in list_recipes()]
    assert {"sft", "grpo"} <= set(names)
    assert names == sorted(names)
    with pytest.raises(KeyError, match="unknown recipe 'nope'; known: .*sft"):
        get_recipe("nope")


def test_bad_config_exits_2_naming_the_field(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    config: dict[str, object] = {
        "model_path": str(tiny_model_dir),
        "train_file": str(arith_train_file),
        "output_dir": str(tmp_path / "out"),
        "learning_rate": "fast",
    }
    proc = run_trainers("sft", config, tmp_path / "bad.json")
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and "learning_rate" in lines[0], proc.stderr

    config.pop("learning_rate")
    config["max_stepz"] = 3
    proc = run_trainers("sft", config, tmp_path / "typo.json")
    assert proc.returncode == 2 and "unknown field 'max_stepz'" in proc.stderr

    config.pop("max_stepz")
    config["train_file"] = str(tmp_path / "missing.jsonl")
    proc = run_trainers("sft", config, tmp_path / "nodata.json")
    assert proc.returncode == 2 and "does not exist" in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


def test_sft_subprocess_writes_loadable_checkpoint(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    out = tmp_path / "out"
    config = {
        "model_path": str(tiny_model_dir),
        "train_file": str(arith_train_file),
        "output_dir": str(out),
        "max_steps": 22,
        "per_device_train_batch_size": 16,
        "logging_steps": 8,
        "max_train_samples": 500,
    }
    proc = run_trainers("sft", config, tmp_path / "sft.json")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "[trainers] step 22/22" in proc.stdout
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["steps"] == 22 and metrics["train_loss"] > 0 and metrics["samples_per_second"] > 0
    assert not metrics["stopped_early"]
    rows = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
    assert [row["step"] for row in rows if "loss" in row] == [
        1,
        8,
        16,
        22,
    ]  # the first, every 8th and the last
    assert not (out / ".tmp").exists()
    AutoTokenizer.from_pretrained(out)
    model = AutoModelForCausalLM.from_pretrained(out)
    assert model.config.num_hidden_layers >= 1
