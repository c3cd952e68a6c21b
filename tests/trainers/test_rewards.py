"""Reward functions on completions the way models really write them."""

from __future__ import annotations

import pytest

from trainers.rewards import arith_correct, arith_format, gsm8k_correct, reward_functions


def test_arith_correct_scores_the_first_number_before_a_stop() -> None:
    completions = ["95", "95\n12", "95 and more", "-5", "9 5", "", "095", "96"]
    answers = ["95", "95", "95", "-5", "95", "95", "95", "95"]
    assert arith_correct([""] * 8, completions, answers) == [1.0, 1.0, 1.0, 1.0, 0.0, 0.0, 1.0, 0.0]


def test_arith_format_rewards_bare_numbers() -> None:
    assert arith_format(["", "", ""], ["42", "4 2", "x42"]) == [1.0, 0.0, 0.0]


def test_gsm8k_correct_reads_marked_and_last_answers() -> None:
    completions = ["so 3+4 = 7\n#### 7", "The answer is $1,234.", "I think 5, then 6", "no idea"]
    assert gsm8k_correct([""] * 4, completions, ["7", "1234", "6", "3"]) == [1.0, 1.0, 1.0, 0.0]


def test_reward_functions_by_benchmark_and_kind() -> None:
    assert reward_functions("arith") == [arith_correct]
    assert reward_functions("arith", ["correct", "format"]) == [arith_correct, arith_format]
    with pytest.raises(ValueError, match="no reward function for benchmark 'nope'"):
        reward_functions("nope")
    with pytest.raises(ValueError, match="unknown reward kind"):
        reward_functions("arith", ["bogus"])
