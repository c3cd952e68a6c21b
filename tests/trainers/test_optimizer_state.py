"""The optimizer's moments travel with a checkpoint: a run that asks to continue them (`resume_optimizer`) picks them
up exactly and skips its warm-up, and what does not fit (another recipe, other shapes, a damaged file) starts fresh
with a reason."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest
import torch

from tests.trainers.conftest import run_trainers
from trainers.optimizer_state import (
    ABOUT_FILE,
    OPTIMIZER_DIR,
    STATE_FILE,
    SavedState,
    install_optimizer_state,
    read_optimizer_state,
    save_optimizer_state,
)


def _trained(seed: int = 0) -> tuple[torch.nn.Module, torch.optim.AdamW]:
    torch.manual_seed(seed)
    model = torch.nn.Sequential(torch.nn.Linear(6, 4), torch.nn.Tanh(), torch.nn.Linear(4, 2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-2)
    for _ in range(3):
        optimizer.zero_grad()
        model(torch.randn(8, 6)).pow(2).sum().backward()
        optimizer.step()
    return model, optimizer


def _save(model: torch.nn.Module, optimizer: torch.optim.Optimizer, out: Path, max_bytes: int = 2**20) -> str:
    out.mkdir(parents=True, exist_ok=True)
    return save_optimizer_state(
        optimizer, model, out, recipe="SFTRecipeConfig", max_bytes=max_bytes, staging_dir=out / ".tmp"
    )


def test_a_continued_optimizer_takes_the_same_step_as_the_one_that_never_stopped(tmp_path: Path) -> None:
    model, optimizer = _trained()
    assert "saved" in _save(model, optimizer, tmp_path)
    about = json.loads((tmp_path / OPTIMIZER_DIR / ABOUT_FILE).read_text())
    assert about["recipe"] == "SFTRecipeConfig" and about["step"] == 3
    assert about["parameters"] == {"0.weight": [4, 6], "0.bias": [4], "2.weight": [2, 4], "2.bias": [2]}
    assert not (tmp_path / ".tmp" / OPTIMIZER_DIR).exists()

    continued, restarted = copy.deepcopy(model), copy.deepcopy(model)
    saved = read_optimizer_state(tmp_path, continued, recipe="SFTRecipeConfig")
    assert isinstance(saved, SavedState) and saved.step == 3
    resumed = torch.optim.AdamW(continued.parameters(), lr=1e-2)
    install_optimizer_state(resumed, continued, saved)
    fresh = torch.optim.AdamW(restarted.parameters(), lr=1e-2)
    batch = torch.randn(8, 6)
    for m, opt in ((model, optimizer), (continued, resumed), (restarted, fresh)):
        opt.zero_grad()
        m(batch).pow(2).sum().backward()
        opt.step()
    for a, b in zip(model.parameters(), continued.parameters(), strict=True):
        assert torch.equal(a, b)  # the same moments and step count: the same update, to the bit
    # from the same weights, a fresh optimizer's step differs: the check above can tell the two apart
    assert not all(torch.equal(a, b) for a, b in zip(restarted.parameters(), model.parameters(), strict=True))


def test_what_does_not_fit_is_refused_with_a_reason(tmp_path: Path) -> None:
    model, optimizer = _trained()
    _save(model, optimizer, tmp_path)
    assert "not 'GRPORecipeConfig'" in str(read_optimizer_state(tmp_path, model, recipe="GRPORecipeConfig"))
    other = torch.nn.Sequential(torch.nn.Linear(6, 5), torch.nn.Tanh(), torch.nn.Linear(5, 2))
    assert "other parameters" in str(read_optimizer_state(tmp_path, other, recipe="SFTRecipeConfig"))
    (tmp_path / OPTIMIZER_DIR / STATE_FILE).write_bytes(b"\x08\x00\x00\x00\x00\x00\x00\x00not a header")
    assert "cannot be read" in str(read_optimizer_state(tmp_path, model, recipe="SFTRecipeConfig"))
    (tmp_path / OPTIMIZER_DIR / ABOUT_FILE).write_text("{")
    assert "cannot be read" in str(read_optimizer_state(tmp_path, model, recipe="SFTRecipeConfig"))
    assert "no optimizer state" in str(
        read_optimizer_state(tmp_path / "none", model, recipe="SFTRecipeConfig")
    )


def test_a_state_over_the_cap_or_without_moments_is_not_saved(tmp_path: Path) -> None:
    model, optimizer = _trained()
    assert "over save_optimizer_max_mb" in _save(model, optimizer, tmp_path / "big", max_bytes=10)
    assert not (tmp_path / "big" / OPTIMIZER_DIR).exists()
    sgd = torch.optim.SGD(model.parameters(), lr=0.1)
    assert "not an Adam-style optimizer" in _save(model, sgd, tmp_path / "sgd")
    assert not (tmp_path / "sgd" / OPTIMIZER_DIR).exists()


@pytest.mark.slow
def test_sft_continued_from_its_own_checkpoint_keeps_the_optimizer_and_skips_the_warm_up(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    def sft(name: str, model_path: Path, **settings: object) -> tuple[Path, str, list[dict[str, float]]]:
        out = tmp_path / name
        config = {
            "model_path": str(model_path),
            "train_file": str(arith_train_file),
            "output_dir": str(out),
            "max_steps": 6,
            "warmup_steps": 4,
            "learning_rate": 1e-3,
            "per_device_train_batch_size": 16,
            "logging_steps": 1,
            "max_train_samples": 200,
            **settings,
        }
        proc = run_trainers("sft", config, tmp_path / f"{name}.json")
        assert proc.returncode == 0, proc.stderr[-3000:]
        rows = [json.loads(line) for line in (out / "log_history.jsonl").read_text().splitlines()]
        return out, proc.stdout, [row for row in rows if "learning_rate" in row]

    first, log, rows = sft("first", tiny_model_dir)
    assert (first / OPTIMIZER_DIR / STATE_FILE).is_file() and "optimizer state saved" in log
    assert "continuing" not in log and rows[0]["learning_rate"] < 1e-3  # from the base model: a warm-up
    about = json.loads((first / OPTIMIZER_DIR / ABOUT_FILE).read_text())
    assert about["recipe"] == "SFTRecipeConfig" and about["step"] == 6

    second, log, rows = sft("second", first, resume_optimizer=True)
    assert "continuing the starting checkpoint's optimizer (Adam's moments at step 6); no warm-up" in log
    assert rows[0]["learning_rate"] == pytest.approx(1e-3)  # the full rate from the first step
    assert json.loads((second / OPTIMIZER_DIR / ABOUT_FILE).read_text())["step"] == 12

    _, log, rows = sft("fresh", first)  # resuming is a choice: off by default
    assert "continuing" not in log and rows[0]["learning_rate"] < 1e-3

    weights_only, log, _ = sft("weights-only", first, save_optimizer_max_mb=0)
    assert not (weights_only / OPTIMIZER_DIR).exists()
    _, log, rows = sft("after-weights-only", weights_only, resume_optimizer=True)
    assert "continuing" not in log and rows[0]["learning_rate"] < 1e-3
