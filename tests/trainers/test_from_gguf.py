"""A GGUF file becomes an ordinary Hugging Face folder: every weight as the file holds it, the tokenizer and chat
template, no quantization config; a file that cannot be converted leaves nothing behind.

The GGUF is written here by the `gguf` package from a tiny llama (tests/support/tiny_gguf.py): no download.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from tests.support.tiny_gguf import CHAT_TEMPLATE, q4_1_roundtrip, write_tiny_gguf
from trainers.from_gguf import SOURCE_FILE, convert_gguf

QUANTIZED_HF = "model.layers.0.mlp.down_proj.weight"  # tiny_gguf.QUANTIZED under its transformers name


@pytest.fixture(scope="module")
def converted(tmp_path_factory: pytest.TempPathFactory) -> tuple[torch.nn.Module, Path, Path]:
    folder = tmp_path_factory.mktemp("gguf")
    original, gguf_file = write_tiny_gguf(folder / "tiny.Q4_1.gguf")
    said: list[str] = []
    out = convert_gguf(gguf_file, folder / "hf", source={"package": "test"}, say=said.append)
    assert said and said[-1].startswith("converted: ")  # progress lines while it works
    return original, gguf_file, out  # type: ignore[return-value]


def test_the_folder_holds_every_weight_the_file_holds(converted: tuple[torch.nn.Module, Path, Path]) -> None:
    original, _, out = converted
    model = AutoModelForCausalLM.from_pretrained(out)
    mine, theirs = model.state_dict(), original.state_dict()
    assert set(mine) == set(theirs)
    for key, value in theirs.items():
        expected = value.numpy()
        # written as Q4_1: what the file holds is the quantized value, not the original
        if key == QUANTIZED_HF:
            expected = q4_1_roundtrip(expected)
            assert not np.array_equal(expected, value.numpy())
        assert np.array_equal(mine[key].numpy(), expected), key
    assert model.config.tie_word_embeddings and model.lm_head.weight.data_ptr() == (
        model.model.embed_tokens.weight.data_ptr()
    )


def test_it_computes_what_transformers_computes_from_the_gguf_itself(
    converted: tuple[torch.nn.Module, Path, Path],
) -> None:
    _, gguf_file, out = converted
    from_file = AutoModelForCausalLM.from_pretrained(str(gguf_file.parent), gguf_file=gguf_file.name)
    from_folder = AutoModelForCausalLM.from_pretrained(out)
    ids = torch.tensor([[1, 40, 41, 42, 2, 1, 50, 60]])
    with torch.no_grad():
        assert torch.equal(from_file(ids).logits, from_folder(ids).logits)


def test_an_ordinary_folder_with_tokenizer_template_and_no_quantization_config(
    converted: tuple[torch.nn.Module, Path, Path],
) -> None:
    _, _, out = converted
    config = json.loads((out / "config.json").read_text())
    assert "quantization_config" not in config and config["architectures"] == ["LlamaForCausalLM"]
    assert (out / "model.safetensors").is_file() and (out / "generation_config.json").is_file()
    generation = json.loads((out / "generation_config.json").read_text())
    assert generation["eos_token_id"] == 2 and generation["pad_token_id"] == 2
    tokenizer = AutoTokenizer.from_pretrained(out)
    assert tokenizer.chat_template == CHAT_TEMPLATE
    assert (tokenizer.eos_token, tokenizer.bos_token) == ("<|im_end|>", "<|im_start|>")
    text = tokenizer.apply_chat_template(
        [{"role": "user", "content": "2+2"}], add_generation_prompt=True, tokenize=False
    )
    assert text == "<|im_start|>user\n2+2<|im_end|>\n<|im_start|>assistant\n"
    assert tokenizer.decode(tokenizer("hello there")["input_ids"]) == "hello there"
    source = json.loads((out / SOURCE_FILE).read_text())
    assert (
        source["package"] == "test" and source["gguf_file"] == "tiny.Q4_1.gguf" and source["parameters"] > 0
    )


def test_a_file_that_is_not_gguf_leaves_no_folder(tmp_path: Path) -> None:
    bad = tmp_path / "broken.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 64)
    with pytest.raises(Exception):  # noqa: B017 - whichever reader error; the point is what is left
        convert_gguf(bad, tmp_path / "out", source={})
    assert not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir()] == ["broken.gguf"]  # no half-written staging folder either
