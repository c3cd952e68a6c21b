"""Train-row choices (`answer_format`, `filter_by_verifier`) and rows without an answer, as recipes read them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from trainers.algorithms.sft import SFTRecipeConfig
from trainers.data import DataFileError, RowMoves, prompt_answer_dataset, read_jsonl, tokenized_sft_dataset


def _file(path: Path, rows: list[tuple[str, str]]) -> Path:
    path.write_text("".join(json.dumps({"prompt": p, "answer": a}) + "\n" for p, a in rows))
    return path


def test_moves_come_from_the_config_and_none_is_nothing_to_do(tmp_path: Path) -> None:
    base = {"model_path": tmp_path, "train_file": tmp_path / "t.jsonl", "output_dir": tmp_path / "o"}
    assert RowMoves.of(SFTRecipeConfig.model_validate(base)) is None
    moves = RowMoves.of(
        SFTRecipeConfig.model_validate({**base, "benchmark": "arith-noisy", "filter_by_verifier": True})
    )
    assert moves == RowMoves(benchmark="arith-noisy", filter_by_verifier=True)


def test_the_verifier_drops_wrong_answers_and_keeps_prompts_without_one(tmp_path: Path) -> None:
    data = _file(tmp_path / "t.jsonl", [("2+2=", "4"), ("2+3=", "6"), ("9-1=", ""), ("7+7=", "14")])
    rows = read_jsonl(data, moves=RowMoves(benchmark="arith", filter_by_verifier=True))
    assert [r["prompt"] for r in rows] == ["2+2=", "9-1=", "7+7="]
    assert [
        r["prompt"] for r in read_jsonl(data, limit=2, moves=RowMoves("arith", filter_by_verifier=True))
    ] == ["2+2="]  # the first `limit` rows of the file, then filtered
    with pytest.raises(DataFileError, match="'countdown' has no verifier"):
        read_jsonl(data, moves=RowMoves(benchmark="countdown", filter_by_verifier=True))


def test_final_number_reformats_answers_and_drops_those_without_a_number(tmp_path: Path) -> None:
    data = _file(
        tmp_path / "t.jsonl",
        [("2+2=", "The answer is 4."), ("5+5=", "5 + 5 = 10. #### 10"), ("1+1=", "two"), ("3-3=", "")],
    )
    moves = RowMoves(benchmark="arith", answer_format="final_number", filter_by_verifier=True)
    rows = read_jsonl(data, moves=moves)
    assert [(r["prompt"], r["answer"]) for r in rows] == [("2+2=", "4"), ("5+5=", "10"), ("3-3=", "")]
    only_words = _file(tmp_path / "w.jsonl", [("1+1=", "two")])
    with pytest.raises(DataFileError, match="no rows left"):
        read_jsonl(only_words, moves=RowMoves(benchmark="arith", answer_format="final_number"))


def test_supervised_rows_skip_prompts_without_an_answer_and_rl_keeps_them(
    tmp_path: Path, tiny_model_dir: Path
) -> None:
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    data = _file(tmp_path / "t.jsonl", [("2+2=", "4"), ("9-1=", ""), ("7+7=", "14")])
    assert len(tokenized_sft_dataset(data, tokenizer, max_length=64)) == 2
    assert list(prompt_answer_dataset(data)["answer"]) == ["4", "", "14"]
    blank = _file(tmp_path / "b.jsonl", [("9-1=", "")])
    with pytest.raises(DataFileError, match="no row has an answer; train on the prompts with a recipe"):
        tokenized_sft_dataset(blank, tokenizer, max_length=64)


def test_recipes_without_row_choices_refuse_them(tmp_path: Path) -> None:
    from pydantic import ValidationError

    from trainers.algorithms.dpo import DPOConfig

    with pytest.raises(ValidationError, match="filter_by_verifier"):
        DPOConfig.model_validate(
            {
                "model_path": tmp_path,
                "train_file": tmp_path,
                "output_dir": tmp_path,
                "filter_by_verifier": True,
            }
        )
