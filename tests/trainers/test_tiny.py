"""tiny-arith: tokenizer round-trip, a loadable checkpoint with provenance, and an atomic build."""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoModelForCausalLM, AutoTokenizer

from trainers.tiny import build_char_tokenizer, save_model_atomically, train_tiny_model


def test_char_tokenizer_round_trips_text_and_marks_sequences() -> None:
    tok = build_char_tokenizer()
    text = "37+58=95\nWhat is 6*7? A: 42."
    ids = tok(text)["input_ids"]
    assert ids[0] == tok.bos_token_id
    assert len(ids) == len(text) + 1  # one token per character
    assert tok.decode(ids, skip_special_tokens=True) == text
    assert tok("9<eos>")["input_ids"][-1] == tok.eos_token_id
    assert tok.pad_token_id is not None and tok.pad_token_id != tok.eos_token_id
    assert tok.convert_ids_to_tokens(tok("~")["input_ids"])[1] == "~"
    assert tok("é")["input_ids"][1] == tok.unk_token_id


def test_tiny_model_loads_with_auto_classes(tiny_model_dir: Path) -> None:
    for name in (
        "model.safetensors",
        "config.json",
        "generation_config.json",
        "tokenizer.json",
        "rlloop_model.json",
    ):
        assert (tiny_model_dir / name).is_file(), name
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    params = sum(p.numel() for p in model.parameters())
    assert 200_000 < params < 1_500_000
    assert tok.decode(tok("12+30=")["input_ids"], skip_special_tokens=True) == "12+30="
    provenance = json.loads((tiny_model_dir / "rlloop_model.json").read_text())
    assert provenance["name"] == "tiny-arith" and provenance["seed"] == 0 and provenance["steps"] > 0


def test_training_is_deterministic_for_a_seed() -> None:
    first, _, stats_a = train_tiny_model(seed=3, steps=3, progress=False)
    second, _, stats_b = train_tiny_model(seed=3, steps=3, progress=False)
    assert stats_a["final_loss"] == stats_b["final_loss"]
    for (name, a), (_, b) in zip(first.state_dict().items(), second.state_dict().items(), strict=True):
        assert (a == b).all(), name


def test_save_replaces_the_folder_in_one_step(tmp_path: Path) -> None:
    model, tok, _ = train_tiny_model(seed=0, steps=1, progress=False)
    out = tmp_path / "tiny"
    out.mkdir()
    (out / "stale.txt").write_text("old")
    save_model_atomically(model, tok, out, {"name": "t"})
    assert not (out / "stale.txt").exists()
    assert (out / "model.safetensors").is_file()
    assert [p.name for p in tmp_path.iterdir()] == ["tiny"]  # no staging folder left behind
