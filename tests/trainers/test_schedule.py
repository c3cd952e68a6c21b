"""trainers.schedule: the learning rate follows the trial's own time, so a time-boxed trial anneals.

Before it, a time-boxed trial ran with `max_steps=100000`, and a `linear` schedule stayed flat for the whole trial
(1.00e-03 to 9.99e-04 over 55 steps, measured 2026-12-04). Now every recipe measures its progress as the larger of
steps done / max_steps and training seconds spent / the seconds it has.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from tests.trainers.conftest import run_trainers
from trainers.algorithms.sft import SFTRecipeConfig
from trainers.registry import get_recipe
from trainers.schedule import LearningRate, ScheduleError, TrialClock, lr_factor


def test_the_shapes_warm_up_then_decay_or_hold_then_cool_down() -> None:
    linear = [lr_factor(p, kind="linear", warmup=0.1) for p in (0.0, 0.05, 0.1, 0.55, 1.0)]
    assert linear == pytest.approx([0.0, 0.5, 1.0, 0.5, 0.0])
    cosine = [lr_factor(p, kind="cosine", warmup=0.0, floor=0.1) for p in (0.0, 0.5, 1.0)]
    assert cosine == pytest.approx([1.0, 0.55, 0.1])
    wsd = [lr_factor(p, kind="constant", warmup=0.1, cooldown=0.2) for p in (0.05, 0.5, 0.8, 0.9, 1.0)]
    assert wsd == pytest.approx([0.5, 1.0, 1.0, 0.5, 0.0])
    assert lr_factor(0.99, kind="constant_with_warmup", warmup=0.05) == 1.0


def test_a_schedule_that_cannot_be_followed_is_refused_with_the_reason() -> None:
    base = {"model_path": "m", "train_file": "t.jsonl", "output_dir": "o"}
    with pytest.raises(ValidationError, match="as long as the whole trial"):
        SFTRecipeConfig.model_validate({**base, "max_steps": 10, "warmup_steps": 10})
    with pytest.raises(ValidationError, match="leave no time at the peak rate"):
        SFTRecipeConfig.model_validate({**base, "warmup_ratio": 0.5, "cooldown_ratio": 0.5})
    with pytest.raises(ValidationError, match="cooldown_ratio applies to constant schedules"):
        SFTRecipeConfig.model_validate({**base, "lr_scheduler_type": "linear", "cooldown_ratio": 0.2})
    with pytest.raises(ValidationError, match="a trial needs an end"):
        SFTRecipeConfig.model_validate({**base, "max_steps": None})
    with pytest.raises(ValidationError, match="must be before schedule_to"):
        SFTRecipeConfig.model_validate({**base, "schedule_from": 0.5, "schedule_to": 0.5})


def test_a_line_of_trials_follows_one_schedule_between_them() -> None:
    """Four trials covering a quarter of their line's schedule each take, step for step, the rates one run of their
    total length takes: one warm-up (a share of the line), one decay, no restart at each trial."""

    def rates(steps: int, span: tuple[float, float]) -> list[float]:
        clock = TrialClock(None, steps)
        clock.begin_training()
        rate = LearningRate(
            clock, kind="linear", warmup_ratio=0.1, warmup_steps=None, cooldown_ratio=0.0, min_lr_ratio=0.0,
            span=span,
        )  # fmt: skip
        return [rate.factor(step) for step in range(steps)]

    whole = rates(40, (0.0, 1.0))
    pieces = [r for i in range(4) for r in rates(10, (i / 4, (i + 1) / 4))]
    assert pieces == pytest.approx(whole)
    assert max(rates(10, (0.25, 0.5))) < 0.85  # a middle piece neither warms up again nor returns to the peak


def test_the_clock_counts_start_up_and_keeps_back_saving_and_the_hosts_reserve() -> None:
    started = time.time() - 3.0  # the host launched the trial 3 s ago: imports and loading are spent
    clock = TrialClock(10.0, None, reserved_seconds=2.0, started_at=started)
    clock.begin_training(save_s=1.0)
    assert clock.window_s == pytest.approx(4.0, abs=0.1)  # 10 - 3 spent - 2 reserved - 1 to save
    assert clock.progress(0) < 0.05 and not clock.expired(0)
    late = TrialClock(3.0, None, started_at=time.time() - 5.0)
    with pytest.raises(ScheduleError, match="leaves no time to train: start-up and loading took 5"):
        late.begin_training()
    steps = TrialClock(None, 20)
    steps.begin_training()
    assert steps.progress(10) == 0.5 and steps.expired(20) and not steps.expired(19)


RECIPE_SETTINGS: dict[str, dict[str, Any]] = {
    "sft": {"per_device_train_batch_size": 16},
    "dpo": {"per_device_train_batch_size": 8},
    "grpo": {"per_device_train_batch_size": 8, "num_generations": 4, "max_completion_length": 4},
    "opo": {"per_device_train_batch_size": 8, "num_generations": 4, "max_new_tokens": 4},
}


@pytest.mark.slow
@pytest.mark.parametrize("recipe", sorted(RECIPE_SETTINGS))
def test_a_time_boxed_linear_trial_anneals_to_near_zero(
    recipe: str, tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    """No step count, 7 wall seconds: the rate warms up, decays over the seconds the trial has, and its last step
    is taken near zero; metrics.json says the schedule was followed to its end."""
    entry = get_recipe(recipe)
    config = entry.config_class.model_validate(
        {
            "model_path": tiny_model_dir,
            "train_file": arith_train_file,
            "output_dir": tmp_path / "out",
            "max_steps": None,
            "max_seconds": 7.0,
            "lr_scheduler_type": "linear",
            "logging_steps": 1,
            "max_train_samples": 400,
            **RECIPE_SETTINGS[recipe],
        }
    )
    result = entry.run(config)
    rates = [
        row["learning_rate"]
        for line in (tmp_path / "out" / "log_history.jsonl").read_text().splitlines()
        if "learning_rate" in (row := json.loads(line))
    ]
    peak = config.learning_rate
    assert result.steps >= 5 and max(rates) > 0.5 * peak, rates
    assert result.lr_last is not None and result.lr_last < 0.2 * peak, (result.lr_last, rates)
    assert result.schedule_progress is not None and result.schedule_progress > 0.8
    assert result.wall_seconds is not None and result.wall_seconds < 7.0 + 1.5  # saving fit in the budget
    top = rates.index(max(rates))
    assert all(a >= b - 1e-12 for a, b in zip(rates[top:], rates[top + 1 :], strict=False)), rates


@pytest.mark.slow
def test_the_cli_counts_its_imports_against_max_seconds(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    """`python -m trainers` starts the trial's clock at its own start: imports and loading are part of its wall
    seconds (and of max_seconds), and the parts add up to the whole."""
    config = {
        "model_path": str(tiny_model_dir),
        "train_file": str(arith_train_file),
        "output_dir": str(tmp_path / "out"),
        "max_steps": 20,
        "max_seconds": 300.0,
        "per_device_train_batch_size": 16,
        "max_train_samples": 400,
    }
    started = time.time()
    proc = run_trainers("sft", config, tmp_path / "config.json")
    took = time.time() - started
    assert proc.returncode == 0, proc.stderr[-3000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    parts = metrics["startup_parts"]
    assert (
        parts["imports"] > 0.5 and metrics["startup_seconds"] > parts["imports"]
    )  # torch, transformers, TRL
    assert sum(parts.values()) == pytest.approx(metrics["startup_seconds"], abs=0.05)
    whole = metrics["startup_seconds"] + metrics["train_seconds"] + metrics["save_seconds"]
    assert metrics["wall_seconds"] == pytest.approx(whole, abs=1.0) and metrics["wall_seconds"] <= took
    assert metrics["steps"] == 20 and metrics["schedule_progress"] == pytest.approx(
        0.95
    )  # 19 of 20 steps done


@pytest.mark.slow
def test_a_budget_spent_before_training_is_one_clear_line(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path
) -> None:
    config = {
        "model_path": str(tiny_model_dir),
        "train_file": str(arith_train_file),
        "output_dir": str(tmp_path / "out"),
        "max_steps": None,
        "max_seconds": 0.5,
    }
    proc = run_trainers("sft", config, tmp_path / "config.json")
    assert proc.returncode == 2, proc.stderr[-2000:]
    assert "max_seconds=0.5 leaves no time to train: start-up and loading took" in proc.stderr
    assert not (tmp_path / "out" / "metrics.json").exists()


@pytest.mark.slow
def test_two_continued_sft_trials_take_the_rates_of_one_run(
    tmp_path: Path, tiny_model_dir: Path, arith_train_file: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    """A line cut in two: the second trial continues the first's optimizer and the second half of its schedule, so
    the two together step at exactly the rates of one 20-step run (its warm-up once, its decay once)."""
    entry = get_recipe("sft")
    common = {
        "train_file": arith_train_file,
        "per_device_train_batch_size": 16,
        "max_train_samples": 400,
        "logging_steps": 1,
        "warmup_ratio": 0.2,
    }

    def run(out: str, model: Path, steps: int, span: tuple[float, float], resume: bool) -> list[float]:
        config = entry.config_class.model_validate(
            {
                **common,
                "model_path": model,
                "output_dir": tmp_path / out,
                "max_steps": steps,
                "schedule_from": span[0],
                "schedule_to": span[1],
                "resume_optimizer": resume,
            }
        )
        result = entry.run(config)
        assert result.steps == steps
        return [
            row["learning_rate"]
            for line in (tmp_path / out / "log_history.jsonl").read_text().splitlines()
            if "learning_rate" in (row := json.loads(line))
        ]

    whole = run("whole", tiny_model_dir, 20, (0.0, 1.0), False)
    first = run("first", tiny_model_dir, 10, (0.0, 0.5), False)
    capfd.readouterr()
    second = run("second", tmp_path / "first", 10, (0.5, 1.0), True)
    assert (
        "continuing the starting checkpoint's optimizer (Adam's moments at step 10)" in capfd.readouterr().out
    )
    assert first + second == pytest.approx(whole, rel=1e-6)
    metrics = json.loads((tmp_path / "second" / "metrics.json").read_text())
    assert metrics["line_progress"] == pytest.approx(0.95)  # its last step: the line's 20th, begun at 19/20
