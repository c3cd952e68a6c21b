"""RFT: accepted samples queue up into full supervised batches; the rate follows the trial's own progress; on the
tiny policy it raises the share of its samples the checker accepts, from prompts alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch

from tests.trainers.tiny_policy import logged_history, tiny_policy_root
from trainers.algorithms.rft import RFTConfig, kept_rows, run, supervised_batch


def _config(tmp_path: Path, **fields: object) -> RFTConfig:
    base = {"model_path": tmp_path, "train_file": tmp_path / "t.jsonl", "output_dir": tmp_path / "o"}
    return RFTConfig.model_validate({**base, **fields})


def test_kept_rows_are_accepted_distinct_and_capped_per_prompt() -> None:
    texts = ["4", "4", "5", "4", "9", "9", "9", "9"]
    accepted = [1.0, 1.0, 0.0, 1.0, 1.0, 1.0, 0.0, 1.0]
    assert kept_rows(texts, accepted, group=4, per_prompt=1) == [0, 4]
    assert kept_rows(texts, accepted, group=4, per_prompt=2) == [0, 4]  # one distinct text each
    assert kept_rows(["1", "2", "3", "4"], [1.0] * 4, group=2, per_prompt=2) == [0, 1, 2, 3]


def test_the_rate_is_the_trials_schedule_warm_up_in_steps_then_decay(tmp_path: Path) -> None:
    """RFT follows trainers.schedule like every recipe: its 10 warm-up steps, then linear over its progress."""
    from trainers.runtime import Pace

    pace = Pace(_config(tmp_path, max_steps=100))
    pace.begin_training(None)
    rate = pace.rate
    assert rate.factor(5) == 0.5 and rate.factor(10) == pytest.approx(0.9)
    assert rate.factor(99) == pytest.approx(0.01)


def test_a_supervised_batch_left_pads_prompts_and_masks_the_completion() -> None:
    ids, attention, mask, width = supervised_batch(
        [([1, 7], [5, 2]), ([1, 8, 9], [2])], pad_token_id=0, on=torch.device("cpu")
    )
    assert width == 2
    assert ids.tolist() == [[0, 1, 7, 5, 2], [1, 8, 9, 2, 0]]
    assert attention.tolist() == [[0, 1, 1, 1, 1], [1, 1, 1, 1, 0]]
    assert mask.tolist() == [[1, 1], [1, 0]]


def test_any_batch_size_is_whole_groups(tmp_path: Path) -> None:
    assert _config(tmp_path, per_device_train_batch_size=30, num_generations=4).prompts_per_step() == 64


@pytest.mark.slow
def test_rft_raises_the_accepted_share_from_prompts_alone(tmp_path: Path) -> None:
    torch.set_num_threads(1)
    root = tiny_policy_root()
    prompts = tmp_path / "prompts.jsonl"  # the answers blanked: the verifier judges from the prompt
    rows = [json.loads(line) for line in (root / "train8.jsonl").read_text().splitlines()]
    prompts.write_text("".join(json.dumps({**row, "answer": ""}) + "\n" for row in rows))
    out = tmp_path / "out"
    result = run(
        RFTConfig(
            model_path=root / "model",
            train_file=prompts,
            output_dir=out,
            checker="verifier",
            max_steps=12,
            per_device_train_batch_size=16,
            prompts_per_round=8,
            num_generations=8,
            keep_per_prompt=2,
            warmup_steps=0,
            learning_rate=3e-4,  # one Adam step at 1e-3 on 16 completions left the tiny policy answering nothing
            logging_steps=1,
        )
    )
    history = logged_history(out)
    accepted = [row["reward"] for row in history]
    assert result.steps == len(history) == 12 and all(row["loss"] > 0 for row in history)
    assert sum(accepted[-4:]) > 1.5 * sum(accepted[:4]), (
        accepted
    )  # measured: 5% of samples accepted, then 10%
    assert json.loads((out / "metrics.json").read_text())["recipe"] == "rft"


@pytest.mark.slow
def test_rft_stops_when_nothing_is_ever_accepted(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    torch.set_num_threads(1)
    root = tiny_policy_root()
    blank = (
        tmp_path / "blank.jsonl"
    )  # the answer column is empty and the checker is the score: nothing passes
    blank.write_text(json.dumps({"prompt": "12+30=", "answer": ""}) + "\n")
    result = run(
        RFTConfig(model_path=root / "model", train_file=blank, output_dir=tmp_path / "o", prompts_per_round=4)
    )
    assert result.steps == 0 and "nothing accepted in 20 rounds" in capsys.readouterr().out
