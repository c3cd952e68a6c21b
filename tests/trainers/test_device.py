"""Every registered recipe loads its models through trainers.device: each one, run for a step with RLLOOP_DEVICE=cpu
and RLLOOP_DTYPE=bfloat16 (not what anything else would pick on CPU), records in metrics.json that its trained
weights were on cpu in bfloat16. A recipe that loaded its model on its own (fp32, the library default) would record
float32 and fail here. Gradient checkpointing and LoRA run on the same path, in a TRL recipe and a hand-written one.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import LlamaConfig, LlamaForCausalLM

from grader.benchmarks import get_benchmark
from tests.support.openai_server import ScriptedOpenAIServer, reply
from trainers import device
from trainers.algorithms import rft
from trainers.registry import get_recipe, list_recipes
from trainers.tiny import build_char_tokenizer

STEP: dict[str, Any] = {"max_steps": 1, "logging_steps": 1, "max_train_samples": 8}
ONPOLICY: dict[str, Any] = {
    **STEP,
    "per_device_train_batch_size": 2,
    "num_generations": 2,
    "max_new_tokens": 3,
}
# The smallest config of each built-in recipe that takes one real step; a new recipe must add its own here.
CONFIGS: dict[str, dict[str, Any]] = {
    "sft": {**STEP, "per_device_train_batch_size": 2},
    "dpo": {**STEP, "per_device_train_batch_size": 2},
    "grpo": {**STEP, "per_device_train_batch_size": 2, "num_generations": 2, "max_completion_length": 3},
    "opo": ONPOLICY,
    "opcd": {**ONPOLICY, "num_generations": 1, "context": "Add the numbers. ", "top_k": 4},
    "opcd_offpolicy": {**ONPOLICY, "num_generations": 1, "context": "Add the numbers. ", "top_k": 4},
    "gad": {**ONPOLICY, "sft_warmup_steps": 0},
    "oel": {
        **ONPOLICY,
        "num_generations": 1,
        "rounds": 1,
        "episodes_per_round": 2,
        "extractor": "feedback",
    },
    "coach": {**ONPOLICY, "mode": "rl", "coach_model": "coach-model"},
    "rft": {**ONPOLICY, "prompts_per_round": 2, "keep_per_prompt": 2, "warmup_steps": 0},
}


@pytest.fixture(scope="module")
def micro_model(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random two-layer char-level Llama (a few thousand parameters): only where its weights end up matters."""
    torch.manual_seed(0)
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=128,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    folder = tmp_path_factory.mktemp("micro") / "model"
    LlamaForCausalLM(config).save_pretrained(folder, safe_serialization=True)
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("data") / "train.jsonl"
    samples = get_benchmark("arith").load("train")[:8]  # type: ignore[arg-type]
    path.write_text(
        "".join(json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) + "\n" for s in samples)
    )
    return path


@pytest.fixture
def coach_endpoint(monkeypatch: pytest.MonkeyPatch) -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=["coach-model"], api_key="sk-test") as server:
        monkeypatch.setenv("OPENAI_BASE_URL", server.base_url)
        monkeypatch.setenv("OPENAI_API_KEY", "sk-test")
        server.enqueue(reply({"scores": [0.0, 1.0]}))
        yield server


def _run(recipe: str, overrides: dict[str, Any], model: Path, train_file: Path, out: Path) -> dict[str, Any]:
    entry = get_recipe(recipe)
    config = entry.config_class.model_validate(
        {**overrides, "model_path": model, "train_file": train_file, "output_dir": out, "benchmark": "arith"}
    )
    entry.run(config)
    return dict(json.loads((out / "metrics.json").read_text()))


def test_every_registered_recipe_has_a_one_step_config() -> None:
    assert sorted(CONFIGS) == sorted(r.name for r in list_recipes())


@pytest.mark.parametrize("recipe", sorted(CONFIGS))
def test_recipe_trains_on_the_device_and_dtype_trainers_device_picks(
    recipe: str,
    micro_model: Path,
    train_file: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    coach_endpoint: ScriptedOpenAIServer,
) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    monkeypatch.setenv(device.DTYPE_ENV, "bfloat16")
    if (
        recipe == "rft"
    ):  # a random micro model never answers right; accept every sample so that a step is taken
        monkeypatch.setattr(
            rft, "checker", lambda config: lambda completions, samples: [1.0] * len(completions)
        )
    metrics = _run(recipe, CONFIGS[recipe], micro_model, train_file, tmp_path / "out")
    assert (metrics["device"], metrics["dtype"]) == ("cpu", "bfloat16"), metrics
    assert metrics["steps"] >= 1


@pytest.mark.parametrize("recipe", ["sft", "opo"])
def test_gradient_checkpointing_and_lora_train_on_the_same_path(
    recipe: str, micro_model: Path, train_file: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    torch.set_num_threads(1)
    monkeypatch.setenv(device.DEVICE_ENV, "cpu")
    overrides = {
        **CONFIGS[recipe],
        "lora": True,
        "lora_r": 2,
        "lora_alpha": 4,
        "gradient_checkpointing": True,
    }
    metrics = _run(recipe, overrides, micro_model, train_file, tmp_path / "out")
    assert (metrics["device"], metrics["dtype"], metrics["lora_merged"]) == ("cpu", "float32", True), metrics
    assert metrics["train_loss"] is not None


def test_auto_is_cpu_fp32_here_and_bad_choices_say_what_to_set(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(device.DEVICE_ENV, raising=False)
    monkeypatch.delenv(device.DTYPE_ENV, raising=False)
    if not torch.cuda.is_available():
        assert device.placement() == device.Placement(torch.device("cpu"), torch.float32)
        with pytest.raises(device.DeviceChoiceError, match="no CUDA device.*RLLOOP_DEVICE=cpu"):
            device.pick_device("cuda")
    assert device.pick_dtype(torch.device("cpu"), "bf16") == torch.bfloat16
    with pytest.raises(device.DeviceChoiceError, match="not a dtype"):
        device.pick_dtype(torch.device("cpu"), "int8")
    with pytest.raises(device.DeviceChoiceError, match="cpu or cuda only"):
        device.pick_device("meta")


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_trial_asked_for_cuda_without_one_ends_with_one_line(
    micro_model: Path, train_file: Path, tmp_path: Path
) -> None:
    config = tmp_path / "config.json"
    config.write_text(
        json.dumps(
            {
                **CONFIGS["opo"],
                "model_path": str(micro_model),
                "train_file": str(train_file),
                "output_dir": str(tmp_path / "o"),
            }
        )
    )
    env = {**os.environ, device.DEVICE_ENV: "cuda", "PYTHONPATH": str(Path(__file__).resolve().parents[2])}
    done = subprocess.run(
        [sys.executable, "-m", "trainers", "opo", "--config", str(config)],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 2, done.stdout + done.stderr
    assert (
        done.stderr.strip()
        .splitlines()[-1]
        .startswith("error: RLLOOP_DEVICE='cuda' but torch sees no CUDA device")
    )
