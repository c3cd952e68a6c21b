"""Safe checkpoint handling: roots, limits, remote code, architecture/vocab checks, pickles, LoRA merging."""

from __future__ import annotations

import json
import os
import shutil
import time
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from grader.checkpoint import (
    BaseModelReference,
    CheckpointError,
    content_hash,
    inspect_checkpoint,
    load_checkpoint,
    load_model,
    locate_submission,
    snapshot_submission,
    weights_fingerprint,
)
from grader.config import CheckpointLimits
from tests.grader.tiny import make_tiny_model

LIMITS = CheckpointLimits()


@pytest.fixture(scope="module")
def base_ref(tiny_base: Path) -> BaseModelReference:
    return BaseModelReference.read(tiny_base)


def _copy(src: Path, dst: Path) -> Path:
    return Path(shutil.copytree(src, dst))


def _edit_json(path: Path, **changes: object) -> None:
    data = json.loads(path.read_text())
    data.update(changes)
    path.write_text(json.dumps(data))


def test_a_submission_must_lie_in_a_root_and_is_copied_without_following_links(
    tiny_base: Path, tmp_path: Path
) -> None:
    root = tmp_path / "ws"
    _copy(tiny_base, root / "ckpt")
    (tmp_path / "outside").mkdir()
    (tmp_path / "outside" / "test.jsonl").write_text("hidden")
    os.symlink(tmp_path / "outside", root / "link")
    assert locate_submission(str(root / "ckpt"), [root]) == (root, "ckpt")
    assert locate_submission(str(root / "x" / ".." / "ckpt"), [root]) == (root, "ckpt")
    for bad, reason in [
        ("", "empty"),
        ("ws/ckpt", "absolute"),
        (str(root / ".." / "outside"), "outside"),
        (str(tmp_path / "outside"), "outside"),
    ]:
        with pytest.raises(CheckpointError, match=reason):
            locate_submission(bad, [root])
    digest = snapshot_submission(root, "ckpt", tmp_path / "copy", LIMITS)
    assert sorted(p.name for p in (tmp_path / "copy").iterdir()) == sorted(
        p.name for p in tiny_base.iterdir()
    )
    assert len(digest) == 64
    with pytest.raises(CheckpointError, match="does not exist"):
        snapshot_submission(root, "nope", tmp_path / "copy2", LIMITS)
    with pytest.raises(
        CheckpointError, match="not followed|symlink"
    ):  # the link itself, or a folder behind it
        snapshot_submission(root, "link", tmp_path / "copy3", LIMITS)
    (root / "ckpt" / "tokenizer.json").unlink()
    (root / "ckpt" / "tokenizer.json").symlink_to(tmp_path / "outside" / "test.jsonl")
    with pytest.raises(CheckpointError, match="symlink") as refused:
        snapshot_submission(root, "ckpt", tmp_path / "copy4", LIMITS)
    assert str(tmp_path) not in str(refused.value)  # the host's folders are not named to the submitter
    assert not (tmp_path / "copy4").exists()


def test_inspect_refusals(tiny_base: Path, base_ref: BaseModelReference, tmp_path: Path) -> None:
    assert inspect_checkpoint(_copy(tiny_base, tmp_path / "ok"), base_ref, LIMITS).kind == "full"

    remote = _copy(tiny_base, tmp_path / "remote")
    _edit_json(remote / "config.json", auto_map={"AutoModelForCausalLM": "evil.Model"})
    remote_tok = _copy(tiny_base, tmp_path / "remote-tok")
    _edit_json(remote_tok / "tokenizer_config.json", auto_map={"AutoTokenizer": ["evil.Tok", None]})
    arch = _copy(tiny_base, tmp_path / "arch")
    _edit_json(arch / "config.json", model_type="gpt2")
    vocab = _copy(tiny_base, tmp_path / "vocab")
    tok = json.loads((vocab / "tokenizer.json").read_text())
    items = tok["model"]["vocab"]
    a, b = "a", "b"
    items[a], items[b] = items[b], items[a]
    (vocab / "tokenizer.json").write_text(json.dumps(tok))
    no_weights = _copy(tiny_base, tmp_path / "noweights")
    (no_weights / "model.safetensors").unlink()
    bad_json = _copy(tiny_base, tmp_path / "badjson")
    (bad_json / "config.json").write_text("{not json")
    cases = {
        remote: "remote code",
        remote_tok: "remote code",
        arch: "model_type differs",
        vocab: "vocabulary differs",
        no_weights: "no weights",
        bad_json: "not valid JSON",
    }
    for folder, reason in cases.items():
        with pytest.raises(CheckpointError, match=reason):
            inspect_checkpoint(folder.resolve(), base_ref, LIMITS)
    with pytest.raises(CheckpointError, match="more than 2 files"):
        inspect_checkpoint(tiny_base, base_ref, CheckpointLimits(max_files=2))
    with pytest.raises(CheckpointError, match="larger than"):
        inspect_checkpoint(tiny_base, base_ref, CheckpointLimits(max_total_bytes=1000))


def test_content_hash_ignores_mtime_and_tracks_weights(
    tiny_base: Path, base_ref: BaseModelReference, tmp_path: Path
) -> None:
    copy = _copy(tiny_base, tmp_path / "copy")
    future = time.time() + 7200
    os.utime(copy / "model.safetensors", (future, future))
    other = make_tiny_model(tmp_path / "other", seed=9)
    h_base = content_hash(inspect_checkpoint(tiny_base, base_ref, LIMITS))
    assert h_base == content_hash(inspect_checkpoint(copy, base_ref, LIMITS))
    assert h_base != content_hash(inspect_checkpoint(other, base_ref, LIMITS))


def test_torch_weights_load_with_weights_only(
    tiny_base: Path, base_ref: BaseModelReference, tmp_path: Path
) -> None:
    folder = _copy(tiny_base, tmp_path / "bin")
    state = load_file(str(folder / "model.safetensors"))
    (folder / "model.safetensors").unlink()
    torch.save(state, folder / "pytorch_model.bin")
    info = inspect_checkpoint(folder, base_ref, LIMITS)
    assert [p.name for p in info.weight_files] == ["pytorch_model.bin"]
    assert weights_fingerprint(load_checkpoint(info, tiny_base)) == weights_fingerprint(load_model(tiny_base))

    evil = _copy(tiny_base, tmp_path / "evil")
    (evil / "model.safetensors").unlink()
    marker = tmp_path / "pwned"

    class Exploit:
        def __reduce__(self) -> tuple[object, tuple[str]]:
            return (os.system, (f"touch {marker}",))

    torch.save({"model.embed_tokens.weight": Exploit()}, evil / "pytorch_model.bin")
    evil_info = inspect_checkpoint(evil, base_ref, LIMITS)
    with pytest.raises(CheckpointError, match="cannot be read safely"):
        content_hash(evil_info)
    with pytest.raises(CheckpointError, match="cannot be loaded"):
        load_checkpoint(evil_info, tiny_base)
    assert not marker.exists()


@pytest.mark.slow
def test_lora_adapter_is_merged_onto_base(
    tiny_base: Path, base_ref: BaseModelReference, tmp_path: Path
) -> None:
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(0)
    peft_config = LoraConfig(r=4, lora_alpha=8, target_modules=["q_proj", "v_proj"], init_lora_weights=True)
    identity = get_peft_model(load_model(tiny_base), peft_config)  # B = 0: merging changes nothing
    identity.save_pretrained(str(tmp_path / "zero-adapter"))
    trained = get_peft_model(load_model(tiny_base), peft_config)
    with torch.no_grad():
        for name, param in trained.named_parameters():
            if "lora_B" in name:
                param.normal_(0, 0.5)
    trained.save_pretrained(str(tmp_path / "adapter"))

    base_fp = weights_fingerprint(load_model(tiny_base))
    info = inspect_checkpoint((tmp_path / "adapter").resolve(), base_ref, LIMITS)
    assert info.kind == "adapter"
    merged = load_checkpoint(info, tiny_base)
    assert not any("lora" in k for k in merged.state_dict())
    assert weights_fingerprint(merged) != base_fp
    zero = inspect_checkpoint((tmp_path / "zero-adapter").resolve(), base_ref, LIMITS)
    assert weights_fingerprint(load_checkpoint(zero, tiny_base)) == base_fp  # an empty adapter is a copy
    assert content_hash(zero) != content_hash(info)
    _edit_json(tmp_path / "adapter" / "adapter_config.json", peft_type="PREFIX_TUNING")
    with pytest.raises(CheckpointError, match="not a LoRA adapter"):
        inspect_checkpoint((tmp_path / "adapter").resolve(), base_ref, LIMITS)
