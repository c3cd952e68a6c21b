"""tiny-chat: the built-in model shaped like a Qwen instruct model (BPE, special tokens, chat template, tied
embeddings), built once per session (tests/conftest.py `tiny_chat_dir`)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import pytest
import torch
from tokenizers import Tokenizer
from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer

from trainers.tiny_chat import CHAT_TEMPLATE, build_tiny_chat


def test_tokenizer_has_qwen_instruct_special_tokens_and_chat_template(tiny_chat_dir: Path) -> None:
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)  # transformers picks its Qwen2 class, as for real Qwen
    raw = Tokenizer.from_file(str(tiny_chat_dir / "tokenizer.json"))
    sample = "Question: Natalia sold 48 clips.\nAnswer:<|im_end|>\n 37+58="
    assert (
        tok(sample, add_special_tokens=False)["input_ids"] == raw.encode(sample, add_special_tokens=False).ids
    )
    assert [t for t in tok.tokenize("48") if t] == ["4", "8"]  # one digit per token, as Qwen2 splits
    assert tok.eos_token == "<|im_end|>" and tok.pad_token == "<|endoftext|>" and tok.bos_token is None
    assert tok.pad_token_id != tok.eos_token_id
    for special in ("<|endoftext|>", "<|im_start|>", "<|im_end|>"):
        token_id = tok.convert_tokens_to_ids(special)
        assert isinstance(token_id, int) and token_id < 3  # the first ids, one each, not spelled out in bytes
        assert tok(special, add_special_tokens=False)["input_ids"] == [token_id]
    assert 1000 <= len(tok) <= 4096
    assert tok.chat_template == CHAT_TEMPLATE
    # byte-level: any text round-trips, including bytes never seen in training
    text = "Zürich: 37+58=95 ✓\n\tdone"
    assert tok.decode(tok(text, add_special_tokens=False)["input_ids"]) == text
    user = [{"role": "user", "content": "37+58="}]
    assert (
        tok.apply_chat_template(user, tokenize=False, add_generation_prompt=True)
        == "<|im_start|>user\n37+58=<|im_end|>\n<|im_start|>assistant\n"
    )
    with_system = [{"role": "system", "content": "Be brief."}, *user]
    rendered = tok.apply_chat_template(with_system, tokenize=False, add_generation_prompt=False)
    assert rendered == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\n37+58=<|im_end|>\n"


def test_model_is_a_small_tied_qwen2_that_answers_in_the_chat_format(tiny_chat_dir: Path) -> None:
    config = AutoConfig.from_pretrained(tiny_chat_dir)
    assert config.model_type == "qwen2" and config.tie_word_embeddings
    model = AutoModelForCausalLM.from_pretrained(tiny_chat_dir)
    n = sum(p.numel() for p in model.parameters())
    assert 1_000_000 <= n <= 5_000_000
    tied = model.get_input_embeddings().weight.data_ptr(), model.get_output_embeddings().weight.data_ptr()  # type: ignore[operator]
    assert tied[0] == tied[1]
    provenance = json.loads((tiny_chat_dir / "rlloop_model.json").read_text())
    assert provenance["name"] == "tiny-chat" and provenance["parameters"] == n
    tok = AutoTokenizer.from_pretrained(tiny_chat_dir)
    prompt = tok.apply_chat_template(
        [{"role": "user", "content": "37+58="}], tokenize=False, add_generation_prompt=True
    )
    enc = tok(prompt, return_tensors="pt")
    with torch.no_grad():
        out = model.generate(**enc, max_new_tokens=12, do_sample=False, pad_token_id=tok.pad_token_id)
    reply = out[0, enc["input_ids"].shape[1] :].tolist()
    # pretrained, not random: a short number, then the end-of-turn token
    assert tok.eos_token_id in reply, tok.decode(reply)
    answer = str(tok.decode(reply[: reply.index(tok.eos_token_id)]))
    assert answer.strip().isdigit(), answer
    assert provenance["final_loss"] < 2.0


def _digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for name in ("model.safetensors", "tokenizer.json", "tokenizer_config.json", "config.json"):
        digest.update((folder / name).read_bytes())
    return digest.hexdigest()


def test_same_seed_same_bytes(tmp_path: Path) -> None:
    """A short build twice: identical weights and tokenizer files (the full build is the session fixture)."""
    first = build_tiny_chat(tmp_path / "a", seed=3, steps=3, progress=False)
    second = build_tiny_chat(tmp_path / "b", seed=3, steps=3, progress=False)
    assert _digest(first) == _digest(second)
    other = build_tiny_chat(tmp_path / "c", seed=4, steps=3, progress=False)
    assert (other / "model.safetensors").read_bytes() != (first / "model.safetensors").read_bytes()


@pytest.mark.parametrize("name", ["tiny-chat"])
def test_resolve_base_model_builds_tiny_chat_on_first_use(
    name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from agent.run import models

    built: list[str] = []

    def quick_build(n: str, target: Path) -> Path:
        built.append(n)
        return build_tiny_chat(target, steps=1, progress=False)

    monkeypatch.setattr(models, "build_builtin", quick_build)
    path = models.resolve_base_model(name, tmp_path)
    assert path == (tmp_path / "models" / name).resolve() and (path / "config.json").is_file()
    assert models.resolve_base_model(name, tmp_path) == path and built == [name]
