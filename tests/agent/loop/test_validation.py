"""Free validation and the submission policy, on the real tiny-arith model, the grader's engine and a real loop."""

from __future__ import annotations

import json
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.core.records import Proposal, ProposalContext, Validation, ValidSample
from agent.loop.submission import should_submit
from agent.loop.validation import BASE_ID, clearly_apart, gain_low, load_validation, valid_samples, validate
from agent.proposers import PROPOSERS
from agent.proposers.base import SearchDone
from agent.run.config import RunConfig
from grader.benchmarks import get_benchmark
from grader.config import EvalConfig
from grader.evaluation import evaluate
from grader.stats import bootstrap_ci


@pytest.fixture(scope="module")
def arith_samples() -> list:  # type: ignore[type-arg]
    return valid_samples(get_benchmark("arith"), limit=60)


def test_validation_json_has_every_sample_and_agrees_with_the_grader(
    tmp_path: Path, tiny_model_dir: Path, arith_samples: list
) -> None:  # type: ignore[type-arg]
    bench = get_benchmark("arith")
    out = tmp_path / "trials" / "t01" / "validation.json"
    result = validate(
        tiny_model_dir,
        base_model=tiny_model_dir,
        samples=arith_samples,
        benchmark=bench,
        config=EvalConfig(),
        out=out,
    )
    data = json.loads(out.read_text())
    assert {"score", "n", "ci_low", "ci_high", "samples"} <= set(data)
    assert data["n"] == len(data["samples"]) == 60
    assert set(data["samples"][0]) == {"id", "prompt", "expected", "got", "correct"}
    assert [s["id"] for s in data["samples"]] == [s.id for s in arith_samples]
    assert data["score"] == pytest.approx(sum(s["correct"] for s in data["samples"]) / 60)
    assert data["ci_low"] <= data["score"] <= data["ci_high"]
    wrong = [s for s in data["samples"] if not s["correct"]]
    assert wrong and all(s["got"] != s["expected"] for s in wrong)  # the weak base model gets some wrong
    # the grader's own evaluation of the same samples gives the same per-sample scores
    graded = evaluate(tiny_model_dir, arith_samples, bench, EvalConfig())
    assert graded.correct_by_id() == result.by_id()
    assert load_validation(out) == result


def test_a_validation_stops_once_its_place_is_clear_and_says_so(
    tmp_path: Path, tiny_model_dir: Path, arith_samples: list
) -> None:  # type: ignore[type-arg]
    """Sized by the CI it must reach: 20 at a time, stopped where the 99% interval clears the reference; the full
    count where it never does. The answers it scored agree with the full validation's, sample for sample."""
    from agent.loop.validation import clearly_apart

    bench = get_benchmark("arith")
    full = validate(
        tiny_model_dir, base_model=tiny_model_dir, samples=arith_samples, benchmark=bench, config=EvalConfig()
    )
    far_above = validate(
        tiny_model_dir,
        base_model=tiny_model_dir,
        samples=arith_samples,
        benchmark=bench,
        config=EvalConfig(),
        chunk=20,
        settled=lambda scores: clearly_apart(scores, 0.95),  # tiny-arith scores ~6%: clearly below 0.95
    )
    assert far_above.n == 20 and far_above.planned == 60
    assert [s.correct for s in far_above.samples] == [s.correct for s in full.samples[:20]]
    assert far_above.ci_high - far_above.ci_low >= full.ci_high - full.ci_low  # fewer samples: a wider CI
    close = validate(
        tiny_model_dir,
        base_model=tiny_model_dir,
        samples=arith_samples,
        benchmark=bench,
        config=EvalConfig(),
        chunk=20,
        settled=lambda scores: clearly_apart(scores, full.score),  # its own score: never clearly apart
    )
    assert close.n == 60 and close.planned is None and close.score == full.score
    assert not clearly_apart([1.0], 0.0) and clearly_apart([0.0] * 30, 0.5) and clearly_apart([1.0] * 30, 0.5)


def test_a_copy_of_the_reference_is_not_submitted(
    tmp_path: Path, tiny_model_dir: Path, arith_samples: list
) -> None:  # type: ignore[type-arg]
    bench = get_benchmark("arith")
    copy = shutil.copytree(tiny_model_dir, tmp_path / "copy")
    ref = validate(
        tiny_model_dir, base_model=tiny_model_dir, samples=arith_samples, benchmark=bench, config=EvalConfig()
    )
    new = validate(
        copy, base_model=tiny_model_dir, samples=arith_samples, benchmark=bench, config=EvalConfig()
    )
    go, why = should_submit("improved", new, ref, "the base model")
    # the words say what each test compared: the gain counting both scores' noise, and the paired gain, against 0
    assert not go and why.startswith("not submitted: not better than the base model beyond noise")
    assert (
        f"its valid score {new.score:.3f} against the base model's {ref.score:.3f} may be a gain as low as "
        f"{gain_low(new, ref):+.3f} (95% lower bound, both scores' noise counted)" in why
    )
    assert "its gain over the base model may be as low as +0.000 (95% lower bound, not above 0)" in why
    assert should_submit("all", new, ref, "base model")[0]
    assert not should_submit("final", new, ref, "base model")[0]


def _validation(correct: list[float]) -> Validation:
    low, high = bootstrap_ci(correct, resamples=1000, seed=0)
    samples = [
        ValidSample(id=str(i), prompt="", expected="", got="", correct=c) for i, c in enumerate(correct)
    ]
    return Validation(
        score=sum(correct) / len(correct), n=len(correct), ci_low=low, ci_high=high, samples=samples
    )


def test_a_copy_of_a_reference_scored_on_few_samples_is_not_a_gain() -> None:
    """The reference stopped after 100 samples (clearly above its own reference) with a low 0.200; a copy of its
    weights scored all 300, the first 100 answered alike, at 0.263. Its CI's lower bound is above 0.200, which the
    rule before 2026-12-06 took for a gain (a CI against a point score that is itself an estimate); counting both
    scores' noise, and paired on the shared samples, there is none."""
    first = [1.0] * 20 + [0.0] * 80
    ref = _validation(first)
    new = _validation(first + [1.0] * 59 + [0.0] * 141)
    assert new.ci_low > ref.score  # what the old rule compared
    go, why = should_submit("improved", new, ref, "t01")
    assert not go and gain_low(new, ref) < 0, why
    assert "its gain over t01 may be as low as +0.000 (95% lower bound, not above 0)" in why
    # validation's early stop agrees with the decision: the copy's scores never clear the reference's whole CI
    assert not clearly_apart([s.correct for s in new.samples], ref)
    assert clearly_apart([1.0] * 30, ref) and clearly_apart([0.0] * 60, ref)
    assert should_submit("improved", _validation([1.0] * 45 + [0.0] * 55), ref, "t01")[0]


class _CopyParent:
    """t01: a real SFT step up; t02: one step at a learning rate too small to change an answer (a copy of t01)."""

    name = "copy-parent"

    def propose(self, context: ProposalContext) -> Proposal:
        if not context.trials:
            return Proposal(
                hypothesis="SFT lifts the base",
                recipe="sft",
                hyperparameters={"learning_rate": 1e-3, "max_steps": 400, "seed": 0},
            )
        return Proposal(
            hypothesis="no change",
            recipe="sft",
            hyperparameters={"learning_rate": 1e-12, "max_steps": 1, "seed": 1},
            parent="t01",
            operator="ablate",
        )


def _registered(proposer: type) -> Iterator[str]:
    """A test proposer registered for one test only: a name left in the registry would be missing from help texts
    built earlier (`rlloop run --help`)."""
    name = proposer.name  # type: ignore[attr-defined]
    PROPOSERS.register(name, lambda config, budget: proposer(), replace=True)
    yield name
    PROPOSERS.unregister(name)


@pytest.fixture()
def copy_parent_proposer() -> Iterator[str]:
    yield from _registered(_CopyParent)


@pytest.mark.slow
def test_improved_skips_a_checkpoint_that_is_no_better(
    tiny_model_home: Path, copy_parent_proposer: str
) -> None:
    from agent.loop.driver import execute
    from agent.status.runs import read_state

    config = RunConfig.model_validate(
        {
            "home": tiny_model_home,
            "run_id": "skip",
            "loop_n": 2,
            "proposer": copy_parent_proposer,
            "sandbox": "local",
            "eval_limit": 100,
            "public_fraction": 0,
            "test_seed": 20261201,
            "quiet": True,
        }
    )
    summary = execute(config)
    run_dir = tiny_model_home / "runs" / "skip"
    state = read_state(run_dir)
    t1, t2 = state["trials"]
    assert t1["status"] == t2["status"] == "succeeded"
    assert t1["valid_score"] > state["baseline_valid"]["score"] and t1["score"] is not None
    assert t2["score"] is None and t2["submission_id"] is None
    # the same weights answer alike: on the samples both scored (validation stops once its answer is clear, so one
    # may have scored more), every answer of t2 is t1's
    first, second = (
        {
            s["id"]: (s["got"], s["correct"])
            for s in json.loads((run_dir / "trials" / t / "validation.json").read_text())["samples"]
        }
        for t in ("t01", "t02")
    )
    common = first.keys() & second.keys()
    assert len(common) >= 100 and all(first[i] == second[i] for i in common)
    assert t2["submission_note"].startswith(
        "not submitted: not better than t01 beyond noise: its valid score"
    )
    assert state["submissions"] == 1 == summary["submissions"] == summary["trials_submitted"]
    assert summary["trials_trained"] == 2 and summary["not_submitted"][0]["trial_id"] == "t02"
    for name in (BASE_ID, "t01", "t02"):
        assert load_validation(run_dir / "trials" / name / "validation.json") is not None
    import sqlite3

    with sqlite3.connect(run_dir / "grader" / "store.db") as conn:
        paths = [Path(p).parent.name for (p,) in conn.execute("SELECT model_path FROM submissions")]
    assert paths == ["t01"]


class _LiftsTwice:
    """t01: a real SFT step up, far beyond the valid split's noise, so "improved" grades it; t02: more of it."""

    name = "lifts-twice"

    def propose(self, context: ProposalContext) -> Proposal:
        hyperparameters = {"learning_rate": 1e-3, "max_steps": 400, "seed": len(context.trials)}
        if not context.trials:
            return Proposal(hypothesis="SFT lifts the base", recipe="sft", hyperparameters=hyperparameters)
        return Proposal(
            hypothesis="more SFT",
            recipe="sft",
            hyperparameters=hyperparameters,
            parent="t01",
            operator="improve",
        )


@pytest.mark.slow
def test_kill_9_then_resume_never_submits_twice_under_improved(tiny_model_home: Path) -> None:
    """Killed after grading (submit:1), then, resumed, killed after validating, before the policy's decision was
    recorded (validate:2): the run resumed to its end has a grader store holding each graded checkpoint once, and
    every trial the state says was submitted."""
    import signal
    import sqlite3
    import subprocess
    import sys

    from agent.status.runs import read_state
    from tests.agent.loop.test_resume import ARGS, _env

    def rlloop(*args: str, **env: str) -> subprocess.CompletedProcess[str]:
        cli = [sys.executable, "-m", "tests.support.cli_with_proposer", f"{__name__}:_LiftsTwice"]
        return subprocess.run(
            [*cli, *args], env=_env(tiny_model_home, **env), capture_output=True, text=True, timeout=900
        )

    run_dir = tiny_model_home / "runs" / "crash"

    def log() -> str:
        return (run_dir / "run.log").read_text() if (run_dir / "run.log").exists() else "(no run.log)"

    args = [*ARGS, "--proposer", _LiftsTwice.name, "--submit", "improved"]
    for attempt, failpoint in enumerate(["submit:1", "validate:2"]):
        command = ["run", "--run-id", "crash", *args] if attempt == 0 else ["resume", "crash"]
        crashed = rlloop(*command, RLLOOP_FAILPOINT=failpoint)
        assert crashed.returncode == -signal.SIGKILL, failpoint + crashed.stdout + crashed.stderr + log()
    resumed = rlloop("resume", "crash")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr + log()
    state = read_state(run_dir)
    assert state["status"] == "finished" and len(state["trials"]) == 2, log()
    with sqlite3.connect(run_dir / "grader" / "store.db") as conn:
        graded = [
            Path(p).parent.name for (p,) in conn.execute("SELECT model_path FROM submissions ORDER BY id")
        ]
    assert len(graded) == len(set(graded)), graded
    assert graded[:1] == ["t01"], log()
    assert graded == [t["trial_id"] for t in state["trials"] if t["score"] is not None]
    assert all(t["valid_score"] is not None for t in state["trials"])
    # the run's answer is its best checkpoint on valid: graded, at the latest when the run ends
    best_on_valid = max(state["trials"], key=lambda t: t["valid_score"])
    assert best_on_valid["score"] is not None, log()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["best_checkpoint"]["trial_id"] in graded


class _AtCeiling:
    """Ends the search when the base model's valid CI is all it has to go on (as the tree policy does at the
    ceiling): the loop must finish, not fail, and say why."""

    name = "at-ceiling"

    def propose(self, context: ProposalContext) -> Proposal:
        raise SearchDone(f"score at its ceiling: base model valid {context.baseline_valid_score:.3f}")


@pytest.fixture()
def at_ceiling_proposer() -> Iterator[str]:
    yield from _registered(_AtCeiling)


@pytest.mark.slow
def test_a_search_that_is_done_ends_the_run_early_and_says_why(
    tiny_model_home: Path, at_ceiling_proposer: str
) -> None:
    from agent.loop.driver import execute
    from agent.status.runs import read_state

    config = RunConfig.model_validate(
        {
            "home": tiny_model_home,
            "run_id": "done",
            "loop_n": 4,
            "proposer": at_ceiling_proposer,
            "sandbox": "local",
            "eval_limit": 40,
            "public_fraction": 0,
            "quiet": True,
        }
    )
    summary = execute(config)
    state = read_state(tiny_model_home / "runs" / "done")
    assert state["status"] == "finished" and state["trials"] == []
    assert summary["stop_reason"].startswith("search done: score at its ceiling: base model valid 0.")
    assert summary["success"] is True and summary["trials_trained"] == 0
    assert (
        json.loads((tiny_model_home / "runs" / "done" / "summary.json").read_text())["stop_reason"]
        == (summary["stop_reason"])
    )
    assert (
        "stopping early: score at its ceiling" in (tiny_model_home / "runs" / "done" / "run.log").read_text()
    )


def test_games_are_validated_by_playing_the_valid_boards_as_the_grader_plays_test(tmp_path: Path) -> None:
    """A multi-turn benchmark's free validation plays its valid games (the expert games' first boards) to the end,
    with the grader's game loop: the same measure as the hidden test (games won), not single-turn accuracy."""
    from trainers.tiny import build_tiny

    lake = build_tiny("tiny-lake", tmp_path / "tiny-lake", progress=False)
    bench = get_benchmark("frozenlake")
    games = valid_samples(bench, limit=40)
    assert len(games) == 40 and all("layout" in g.meta and g.answer.startswith("[") for g in games)
    result = validate(
        lake, base_model=lake, samples=games, benchmark=bench, config=EvalConfig(), out=tmp_path / "v.json"
    )
    assert {s.got.split(" after ")[0] for s in result.samples} <= {"won", "not won"}
    assert 0.0 < result.score < 1.0, result.score  # tiny-lake wins some games and loses others
    graded = evaluate(lake, games, bench, EvalConfig())
    assert graded.correct_by_id() == result.by_id()
