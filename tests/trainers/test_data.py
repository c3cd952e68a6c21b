"""SFT rows tokenized by rlloop in one batched pass are the rows TRL's SFTTrainer builds from the same file itself."""

from __future__ import annotations

from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM, AutoTokenizer

from tasks.chat import ChatPrompts
from tests.trainers.conftest import write_jsonl
from trainers.data import DataFileError, prompt_completion_dataset, tokenized_sft_dataset


@pytest.fixture(scope="module")
def train_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("sft-data") / "train.jsonl", "train", 40)


def _trl_rows(
    model_dir: Path,
    train_file: Path,
    chat: ChatPrompts | None,
    max_length: int,
    completion_only_loss: bool,
    tmp: Path,
) -> list[tuple[list[int], list[int]]]:
    """What TRL's own preparation makes of `prompt_completion_dataset`: the reference."""
    from trl import SFTConfig, SFTTrainer

    trainer = SFTTrainer(
        model=AutoModelForCausalLM.from_pretrained(model_dir),
        args=SFTConfig(
            output_dir=str(tmp),
            report_to="none",
            use_cpu=True,
            max_steps=1,
            max_length=max_length,
            completion_only_loss=completion_only_loss,
        ),
        train_dataset=prompt_completion_dataset(train_file, chat=chat),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
    )
    data = trainer.train_dataset
    return list(zip(data["input_ids"], data["labels"], strict=True))  # type: ignore[index]


@pytest.mark.parametrize(
    ("max_length", "completion_only_loss"),
    [(256, True), (256, False), (0, True)],  # 0: the median prompt's length, so half the rows are dropped
    ids=["default", "loss-on-prompt-too", "truncated"],
)
@pytest.mark.parametrize("prompt_format", ["plain", "chat"])
def test_the_batched_rows_are_trls_rows(
    prompt_format: str,
    max_length: int,
    completion_only_loss: bool,
    tiny_model_dir: Path,
    tiny_chat_dir: Path,
    train_file: Path,
    tmp_path: Path,
) -> None:
    model_dir = tiny_chat_dir if prompt_format == "chat" else tiny_model_dir
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    chat = ChatPrompts.of(tokenizer, "Add.") if prompt_format == "chat" else None
    if max_length == 0:
        prompts = list(prompt_completion_dataset(train_file, chat=chat)["prompt"])
        max_length = sorted(len(ids) for ids in tokenizer(prompts)["input_ids"])[len(prompts) // 2]
    ours = tokenized_sft_dataset(
        train_file, tokenizer, max_length=max_length, completion_only_loss=completion_only_loss, chat=chat
    )
    reference = _trl_rows(model_dir, train_file, chat, max_length, completion_only_loss, tmp_path)
    assert list(zip(ours["input_ids"], ours["labels"], strict=True)) == reference
    assert 0 < len(ours) <= 40
    if "truncated" in str(tmp_path):
        assert len(ours) < 40 and max(len(ids) for ids in ours["input_ids"]) == max_length  # it really cut


def test_a_max_length_that_leaves_no_answer_says_what_to_raise(
    tiny_model_dir: Path, train_file: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with pytest.raises(DataFileError, match="raise max_length"):
        tokenized_sft_dataset(train_file, tokenizer, max_length=2)
