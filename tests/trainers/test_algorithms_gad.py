"""GAD: the discriminator learns to tell the teacher's answers from the student's (Bradley-Terry loss falls)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from tests.trainers.tiny_policy import logged_history, tiny_policy_root
from trainers.algorithms.gad import GADConfig, run, teacher_completions
from trainers.tiny import build_char_tokenizer


def test_teacher_completions_end_in_eos_and_pad_right() -> None:
    tokenizer = build_char_tokenizer()
    ids, mask = teacher_completions(tokenizer, ["7", "123"])
    assert ids.shape == (2, 4)
    assert ids[0, 1].item() == tokenizer.eos_token_id and mask[0].tolist() == [1, 1, 0, 0]
    assert ids[1, 3].item() == tokenizer.eos_token_id and mask[1].tolist() == [1, 1, 1, 1]


@pytest.mark.slow
def test_gad_discriminator_learns(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    root = tiny_policy_root()
    out = tmp_path / "out"
    result = run(
        GADConfig(
            model_path=root / "model",
            train_file=root / "train8.jsonl",
            output_dir=out,
            learning_rate=1e-3,
            discriminator_learning_rate=3e-3,
            sft_warmup_steps=3,
            lr_scheduler_type="constant",  # calibrated at a constant rate; schedules: test_schedule.py
            warmup_ratio=0.0,
            max_steps=17,
            per_device_train_batch_size=32,
            num_generations=8,
            logging_steps=5,
        )
    )
    history = logged_history(out)
    assert len(history) == 20 and result.steps == 20
    bt = [row["bt_loss"] for row in history]
    assert sum(bt[-4:]) / 4 < sum(bt[:4]) / 4 - 0.1, bt
    assert all("student_reward" in row for row in history[3:])  # the game ran after the warm-up
    assert (out / "metrics.json").is_file()
