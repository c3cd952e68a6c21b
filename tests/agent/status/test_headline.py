"""A run's headline in words: both halves named, from the loop's checkpoint and summary.json, however far it got."""

from __future__ import annotations

from typing import Any

from agent.status.headline import checkpoint_text, run_headline

STATE = {"baseline_score": 0.09, "best_score": 0.714, "best_trial_id": "t04", "submissions": 3}
FINAL = {
    "baseline_score": 0.09,
    "best_score": 0.714,
    "best_submission_id": 3,
    "baseline_private_score": 0.102,
    "final_private_score": 0.706,
    "total_submissions": 3,
    "public_private_split": True,
    "reported": {"scored_on": "private", "baseline": 0.102, "best": 0.706, "improvement": 0.604},
}


def summary(**extra: Any) -> dict[str, Any]:
    return {"status": "finished", "grader": FINAL, **extra}


def test_a_finished_run_names_both_halves_and_its_checkpoint() -> None:
    found = {"trial_id": "t04", "path": "/home/runs/r/trials/t04/output", "sha256": "ab", "verified": True}
    headline = run_headline(STATE, summary(best_checkpoint=found))
    assert headline.text == (
        "public half: best 0.714 (t04), +62.4 points over the baseline 0.090 in 3 submissions; "
        "private half: 0.706 vs 0.102 (+60.4 points)"
    )
    assert checkpoint_text(headline) == "best checkpoint: /home/runs/r/trials/t04/output"
    unverified = run_headline(
        STATE, summary(best_checkpoint={**found, "verified": False, "problem": "changed"})
    )
    assert checkpoint_text(unverified).endswith("(not what the grader scored: changed)")


def test_a_running_run_says_so_far_and_keeps_the_private_half_for_its_end() -> None:
    headline = run_headline({**STATE, "submissions": 1}, {})
    assert headline.text == (
        "public half: best so far 0.714 (t04), +62.4 points over the baseline 0.090 in 1 submission; "
        "private half: revealed when the run ends"
    )
    assert run_headline({}, {}).text == "no baseline yet"
    waiting = run_headline({"baseline_score": 0.09, "submissions": 0}, {})
    assert waiting.text.startswith("public half: no submission scored so far; baseline 0.090")


def test_a_run_whose_every_submission_was_flagged_reports_its_base_model() -> None:
    final = {**FINAL, "best_submission_id": None, "final_private_score": 0.102}
    headline = run_headline(
        {"baseline_score": 0.09, "submissions": 2}, {"status": "finished", "grader": final}
    )
    assert headline.text == (
        "public half: no unflagged submission scored; baseline 0.090; private half: baseline 0.102"
    )


def test_an_external_agents_run_reads_the_graders_public_figures_not_the_reported_ones() -> None:
    """No loop checkpoint: the public pair comes from the grader's answer, never from summary.json's baseline and
    best_score (the private half when the test set is split)."""
    external = {"status": "finished", "baseline": "0.1020", "best_score": "0.7060", "grader": FINAL}
    headline = run_headline({}, external)
    assert (headline.public_baseline, headline.public_best) == (0.09, 0.714)
    assert headline.text.startswith("public half: best 0.714, +62.4 points over the baseline 0.090")


def test_without_a_split_the_whole_test_set_is_said() -> None:
    final = {**FINAL, "public_private_split": False}
    headline = run_headline(STATE, {"status": "finished", "grader": final})
    assert headline.text == (
        "best 0.714 (t04), +62.4 points over the baseline 0.090 in 3 submissions (the whole test set: no private "
        "half)"
    )
