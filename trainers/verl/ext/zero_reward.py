"""A verl reward function file that gives every response 0: OPCD's whole signal is the KL term verl adds to the
token rewards (`reward.custom_reward_function.path=<VERL_EXT>/zero_reward.py`)."""

from __future__ import annotations

from typing import Any


def compute_score(
    data_source: Any = None,
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Any = None,
    **_: Any,
) -> float:
    """No task reward."""
    return 0.0
