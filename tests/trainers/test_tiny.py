"""tiny-arith: tokenizer round-trip, a loadable checkpoint with provenance, and an atomic build."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from trainers.tiny import TINY_RECIPE, build_char_tokenizer, save_model_atomically, train_tiny_model

REPO = Path(__file__).resolve().parents[2]
BUILD = (
    "import sys, torch; from pathlib import Path; from trainers.tiny import build_tiny_arith; "
    "torch.set_num_threads(int(sys.argv[2])); build_tiny_arith(Path(sys.argv[1]), seed=0, steps=12, progress=False)"
)


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
    environment = provenance["environment"]
    assert environment["torch"] == torch.__version__ and environment["cpu_capability"]
    assert environment["torch_threads"] == TINY_RECIPE.torch_threads


def _build_in_fresh_process(out: Path, threads: int, hash_seed: str) -> dict[str, bytes]:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "PYTHONHASHSEED": hash_seed,
        "OMP_NUM_THREADS": str(threads),
    }
    subprocess.run(
        [sys.executable, "-c", BUILD, str(out), str(threads)], cwd=REPO, env=env, check=True, timeout=300
    )
    return {f.name: f.read_bytes() for f in sorted(out.iterdir())}


@pytest.mark.slow  # builds the model twice more
def test_fresh_builds_are_byte_identical_whatever_the_threads_and_hash_seed(tmp_path: Path) -> None:
    """The weights and tokenizer files repeat byte for byte; only the provenance's timing may differ."""
    first = _build_in_fresh_process(tmp_path / "a", threads=1, hash_seed="1")
    second = _build_in_fresh_process(tmp_path / "b", threads=2, hash_seed="2")
    assert first.keys() == second.keys() and "model.safetensors" in first
    for name in first.keys() - {"rlloop_model.json"}:
        assert first[name] == second[name], name
    provenance = [json.loads(files["rlloop_model.json"]) for files in (first, second)]
    for record in provenance:
        record.pop("train_seconds")
    assert provenance[0] == provenance[1]


def test_the_build_restores_the_callers_thread_count(tmp_path: Path) -> None:
    from trainers.tiny import build_tiny_arith

    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        build_tiny_arith(tmp_path / "tiny", steps=1, progress=False)
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(before)


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


def test_every_game_model_fits_its_games_and_is_built_from_its_train_split(tmp_path: Path) -> None:
    """tiny-lake and tiny-sokoban: each recipe's benchmark is a built-in game whose prompts and replies fit the
    model's positions, and a (short) build records that it saw that game's train split only."""
    from tasks import get_benchmark
    from trainers.tiny import TINY_RECIPES, build_tiny

    assert TINY_RECIPES["tiny-sokoban"].benchmark == "sokoban1"
    tok = build_char_tokenizer()
    for name in ("tiny-lake", "tiny-sokoban"):
        recipe = TINY_RECIPES[name]
        turns = get_benchmark(recipe.benchmark).load("train")
        longest = max(len(tok(t.prompt + t.answer)["input_ids"]) + 1 for t in turns)
        assert longest <= recipe.max_position_embeddings, (name, longest)
    out = build_tiny("tiny-sokoban", tmp_path / "tiny-sokoban", steps=2, progress=False)
    provenance = json.loads((out / "rlloop_model.json").read_text())
    assert provenance["name"] == "tiny-sokoban" and provenance["recipe"]["benchmark"] == "sokoban1"
    assert "sokoban1 'train' split only" in provenance["data"]
