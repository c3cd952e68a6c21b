"""A time box that holds when one step is long: a step that would not fit what is left of the training window (as
long as the longest of the last steps) is not started, in hand-written loops (`Pace.begin_step`) and TRL's
(`ScheduleCallback`). Before, the check was only "is the window spent", and a pretrained model's 10-s steps trained
232 s of a 150-s box."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from transformers import TrainerControl, TrainerState, TrainingArguments

from trainers.config import TrainerConfig
from trainers.runtime import Pace, ScheduleCallback
from trainers.schedule import SAVE_FIXED_S

STEP_S = 0.8
MAX_SECONDS = (
    3.0  # a window of 3.0 - SAVE_FIXED_S = 2.75 s: three 0.8-s steps end at 2.4 s, a fourth at 3.2 s
)


def config(tmp_path: Path) -> TrainerConfig:
    return TrainerConfig(
        model_path=tmp_path,
        train_file=tmp_path / "train.jsonl",
        output_dir=tmp_path / "out",
        max_steps=None,
        max_seconds=MAX_SECONDS,
    )


def test_a_hand_written_loop_does_not_start_a_step_that_would_not_fit(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    pace = Pace(config(tmp_path))
    pace.begin_training(None)
    window = pace.clock.window_s
    assert window is not None and abs(window - (MAX_SECONDS - SAVE_FIXED_S)) < 0.1
    while pace.begin_step():
        time.sleep(STEP_S)
    assert pace.steps == 3  # the fourth would have ended at 3.2 s, past the window
    assert pace.elapsed <= window
    assert pace.ran_out_of_time() is False  # no step count was planned: the clock is the plan
    assert "the next step would take about 0.8s" in capsys.readouterr().out


def test_a_trl_trainer_stops_before_a_step_that_would_not_fit(tmp_path: Path) -> None:
    callback = ScheduleCallback(config(tmp_path))
    args = TrainingArguments(output_dir=str(tmp_path / "trainer"), report_to="none", use_cpu=True)
    state, control = TrainerState(), TrainerControl()
    callback.on_train_begin(args, state, control)
    window = callback.pace.clock.window_s
    assert window is not None
    while not control.should_training_stop:
        time.sleep(STEP_S)
        state.global_step += 1
        callback.on_step_end(args, state, control)
    assert state.global_step == 3 and callback.pace.elapsed <= window


def test_short_steps_still_use_the_whole_window(tmp_path: Path) -> None:
    pace = Pace(config(tmp_path))
    pace.begin_training(None)
    while pace.begin_step():
        time.sleep(0.05)
    window = pace.clock.window_s
    assert window is not None and window - 0.2 <= pace.elapsed <= window
