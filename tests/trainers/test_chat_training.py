"""Training in the chat format on tiny-chat: the prompts trainers build are the grader's, SFT's loss covers the
end-of-turn token, and every recipe (LoRA too) takes a real step on a BPE, chat-template, pad != eos model."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from grader.benchmarks import get_benchmark
from grader.config import EvalConfig
from grader.evaluation import build_prompts
from tests.trainers.test_device import CONFIGS, coach_endpoint  # noqa: F401 - coach_endpoint is a fixture
from trainers.algorithms import rft
from trainers.data import chat_prompts, prompt_completion_dataset
from trainers.registry import get_recipe


@pytest.fixture(scope="module")
def chat_train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("chat-data") / "train.jsonl"
    samples = get_benchmark("arith").load("train")[:16]  # type: ignore[arg-type]
    path.write_text(
        "".join(json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) + "\n" for s in samples)
    )
    return path


def _config(recipe: str, model: Path, train_file: Path, out: Path, **extra: Any) -> Any:
    return get_recipe(recipe).config_class.model_validate(
        {
            **CONFIGS[recipe],
            **extra,
            "model_path": model,
            "train_file": train_file,
            "output_dir": out,
            "benchmark": "arith",
            "prompt_format": "chat",
        }
    )


def test_sft_prompts_are_the_graders_and_the_loss_covers_the_end_of_turn_token(
    tiny_chat_dir: Path, chat_train_file: Path, tmp_path: Path
) -> None:
    from trl import SFTConfig, SFTTrainer

    config = _config("sft", tiny_chat_dir, chat_train_file, tmp_path / "out", system_prompt="Add.")
    chat = chat_prompts(config)
    assert chat is not None
    dataset = prompt_completion_dataset(chat_train_file, chat=chat)
    bench = get_benchmark("arith")
    samples = bench.load("train")[:16]  # type: ignore[arg-type]
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)
    graders = build_prompts(bench, samples, EvalConfig(prompt_style="chat", system_prompt="Add."), tok)
    assert dataset["prompt"] == graders  # train and test prompts are the same text
    assert all(c.endswith("<|im_end|>") for c in dataset["completion"])
    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(tiny_chat_dir),
        args=SFTConfig(output_dir=str(tmp_path / "t"), report_to="none", use_cpu=True, max_steps=1),
        train_dataset=dataset,
        processing_class=tok,
    )
    row = trainer.train_dataset[0]  # type: ignore[index]
    im_end = tok.convert_tokens_to_ids("<|im_end|>")
    in_loss = [label for label in row["labels"] if label != -100]  # what the loss covers
    assert in_loss[-1] == im_end and in_loss.count(im_end) == 1, tok.decode(in_loss)
    assert (
        tok.decode(in_loss[:-1]) == samples[0].answer
    )  # the answer and its end-of-turn, nothing of the prompt


@pytest.mark.parametrize("recipe", sorted(CONFIGS))
def test_every_recipe_trains_on_tiny_chat_in_the_chat_format(
    recipe: str,
    tiny_chat_dir: Path,
    chat_train_file: Path,
    tmp_path: Path,
    coach_endpoint: Any,  # noqa: F811 - the fixture imported above
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    torch.set_num_threads(1)
    if (
        recipe == "rft"
    ):  # tiny-chat never answers right; accept every sample so that a step is taken on chat rows
        monkeypatch.setattr(
            rft, "checker", lambda config: lambda completions, samples: [1.0] * len(completions)
        )
    lora = {"lora": True, "lora_r": 2, "lora_alpha": 4} if recipe == "sft" else {}
    config = _config(recipe, tiny_chat_dir, chat_train_file, tmp_path / "out", **lora)
    get_recipe(recipe).run(config)
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["steps"] >= 1
    saved = AutoTokenizer.from_pretrained(tmp_path / "out")
    assert saved.chat_template == AutoTokenizer.from_pretrained(tiny_chat_dir).chat_template
    assert saved.eos_token == "<|im_end|>" and saved.pad_token == "<|endoftext|>"
    model = AutoModelForCausalLM.from_pretrained(tmp_path / "out")
    assert model.config.model_type == "qwen2"
    if lora:
        assert metrics["lora_merged"] and not any("lora" in n for n, _ in model.named_parameters())
