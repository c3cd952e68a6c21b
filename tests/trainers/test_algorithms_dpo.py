"""DPO through TRL on pairs built from the train file: the chosen-over-rejected reward margin grows."""

from __future__ import annotations

import random
from pathlib import Path

import pytest
import torch

from grader.benchmarks import Sample
from tests.trainers.tiny_policy import logged_history, tiny_policy_root
from trainers.algorithms.dpo import DPOConfig, perturb_answer, preference_rows, run


def test_perturbed_answers_are_wrong_but_close() -> None:
    rng = random.Random(0)
    for answer in ["0", "17", "105"]:
        for _ in range(20):
            wrong = perturb_answer(answer, rng)
            assert wrong != answer and abs(int(wrong) - int(answer)) <= 10
    assert perturb_answer("abc", rng) != "abc"
    assert perturb_answer("a", rng) == "a?"


def test_preference_rows_prefer_the_reference() -> None:
    samples = [Sample(id="1", prompt="2+2=", answer="4")]
    rows = preference_rows(samples, ["5"], seed=0, bos_prefix="<bos>")
    assert rows == [{"prompt": "<bos>2+2=", "chosen": "4", "rejected": "5"}]
    assert preference_rows(samples, [None], seed=0, bos_prefix="")[0]["rejected"] != "4"


@pytest.mark.slow
def test_dpo_widens_reward_margin(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    root = tiny_policy_root()
    out = tmp_path / "out"
    result = run(
        DPOConfig(
            model_path=root / "model",
            train_file=root / "train64.jsonl",
            output_dir=out,
            learning_rate=1e-3,
            beta=0.5,
            max_steps=12,
            per_device_train_batch_size=8,
            logging_steps=1,
            rejected_source="policy",
            policy_samples=2,
            lr_scheduler_type="constant",  # calibrated at a constant rate; schedules: test_schedule.py
            warmup_ratio=0.0,
        )
    )
    margins = [row["rewards/margins"] for row in logged_history(out) if "rewards/margins" in row]
    assert len(margins) == 12
    assert sum(margins[-4:]) / 4 > sum(margins[:4]) / 4 + 0.05, margins
    assert result.extra["rejected_from_policy"] == 64 and result.steps == 12
    assert (out / "model.safetensors").is_file() and (out / "metrics.json").is_file()
