"""Memory across runs: lessons per (benchmark, base model), written atomically, read back by the next run."""

from __future__ import annotations

from pathlib import Path

from agent.core.records import Proposal, TrialRecord
from agent.proposers.memory import best_start, lessons_text, load, memory_file, remember_run


def _trial(trial_id: str, status: str, score: float | None, **proposal: object) -> TrialRecord:
    return TrialRecord(
        trial_id=trial_id,
        index=int(trial_id[1:]),
        proposal=Proposal(hypothesis="h", **proposal),  # type: ignore[arg-type]
        status=status,  # type: ignore[arg-type]
        score=score,
        error="RuntimeError: out of memory" if status == "failed" else None,
    )


def test_lessons_of_one_run_reach_the_next_and_stay_per_benchmark_and_model(tmp_path: Path) -> None:
    trials = [
        _trial("t01", "succeeded", 0.6, recipe="sft", hyperparameters={"learning_rate": 1e-3}),
        _trial("t02", "failed", None, recipe="grpo", hyperparameters={"num_generations": 64}),
        _trial("t03", "succeeded", 0.1, recipe="sft", init_from="t01"),
        _trial("t04", "rejected", None, recipe="sft"),
    ]
    assert lessons_text(tmp_path, "arith", "tiny-arith") is None
    path = remember_run(tmp_path, "arith", "tiny-arith", "run-a", trials, baseline=0.2)
    assert path == tmp_path / "memory" / "arith__tiny-arith.json"
    assert not list(path.parent.glob(".*.tmp"))  # written atomically, no temp file left

    text = lessons_text(tmp_path, "arith", "tiny-arith")
    assert text is not None
    lines = text.splitlines()
    assert lines[0] == "3 trials over 1 earlier run(s) of arith on tiny-arith:"
    assert lines[1].startswith("- worked: sft (learning_rate=0.001) -> score 0.600, +0.400 vs baseline 0.200")
    assert lines[2].startswith(
        "- broke: grpo (num_generations=64) -> not scored; error: RuntimeError: out of memory"
    )
    assert lines[3].startswith("- no gain: sft (from t01) -> score 0.100, -0.100 vs baseline 0.200")
    assert best_start(tmp_path, "arith", "tiny-arith") == ("sft", {"learning_rate": 1e-3})

    remember_run(tmp_path, "arith", "tiny-arith", "run-a", trials[:1], baseline=0.2)  # the same run again
    assert [x.trial_id for x in load(tmp_path, "arith", "tiny-arith").lessons] == ["t01"]
    assert lessons_text(tmp_path, "countdown", "tiny-arith") is None
    assert lessons_text(tmp_path, "arith", "/models/other") is None
    assert memory_file(tmp_path, "arith", "/models/other").name.startswith("arith__models-other-")

    path.write_text("{broken")
    assert load(tmp_path, "arith", "tiny-arith").lessons == []  # unreadable: starts afresh, no crash
