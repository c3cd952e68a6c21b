"""--trial-concurrency: K trials of one step train at once, distinct, within the run's limits, and kill -9 in the
middle of a concurrent step resumes to the uninterrupted run's trials and submissions, retraining nothing finished.

The fast tests run the real tree policy and the real request builder; the slow ones the real CLI, local sandbox
and grader, with `tests/agent/loop/test_resume.py`'s helpers (a fixed step count: the same proposal, the same weights).
"""

from __future__ import annotations

import signal
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.llm.budget import Budget, BudgetLimits
from agent.loop.concurrency import finished, more_proposals, outcome_file, split_request, trial_cpus, width
from agent.proposers.tree import TreeProposer
from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths
from agent.status.runs import read_state
from sandbox import untrusted
from sandbox.base import SandboxRequest
from sandbox.devices import plan_devices
from tests.agent.loop.test_resume import ARGS, _assert_nothing_left, _run, _submissions, _summary
from trainers.model_fit import ModelFit


def _config(tmp_path: Path, **over: Any) -> RunConfig:
    return RunConfig.model_validate({"home": str(tmp_path), "loop_n": 4, "trial_concurrency": 2, **over})


def test_width_respects_trials_submissions_and_approval(tmp_path: Path) -> None:
    assert width(_config(tmp_path, trial_concurrency=1), 0, 9) == 1
    assert width(_config(tmp_path), 0, 9) == 2
    assert width(_config(tmp_path), 3, 9) == 1  # one trial left in the run
    assert width(_config(tmp_path, trial_concurrency=8), 1, 9) == 3
    assert width(_config(tmp_path, submit="all"), 0, 1) == 1  # every checkpoint graded: one submission left
    assert width(_config(tmp_path, submit="improved"), 0, 1) == 2  # not every checkpoint is graded
    assert width(_config(tmp_path, approval="always"), 0, 9) == 1  # each proposal waits for its own decision


def test_cpu_split_and_request(tmp_path: Path) -> None:
    import os

    cores = os.cpu_count() or 1
    assert trial_cpus(None, 2) == max(1.0, cores / 2)
    assert trial_cpus(0.5, 2) == 0.5  # the user's --trial-cpus wins
    assert trial_cpus(None, 1) is None
    request = SandboxRequest(command=["true"], workspace=tmp_path, log_path=tmp_path / "log.txt")
    devices = plan_devices(0)
    assert split_request(request, 1, 0, devices) is request  # K=1: untouched
    assert split_request(request.model_copy(update={"cpus": 0.5}), 2, 1, devices).cpus == 0.5
    split = split_request(request, 2, 1, devices)
    assert split.cpus == max(1.0, cores / 2)
    assert split.env["OMP_NUM_THREADS"] == str(max(1, int(cores / 2)))


class _Run:
    """What more_proposals reads of the run: its config, proposer, budget, reporter and the base model's fit (all
    real; the fit of a model built here, which changes no default)."""

    def __init__(self, tmp_path: Path, limit_s: float | None = None) -> None:
        self.config = RunConfig.model_validate({"home": tmp_path})
        self.proposer = TreeProposer()
        self.budget = Budget(BudgetLimits(max_compute_s=limit_s))
        self.reporter = Reporter(tmp_path / "run.log", quiet=True)
        self.context = SimpleNamespace(fit=ModelFit("built here", 340_000, "a model rlloop built"))


def _context(trials_left: int = 4) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="arith",
        base_model="tiny-arith",
        baseline_score=0.1,
        baseline_valid_score=0.1,
        baseline_valid_ci=(0.05, 0.15),
        best_score=None,
        best_trial_id=None,
        trials=[],
        trials_left=trials_left,
        seconds_left=3600.0,
        recipes=["sft", "grpo"],
    )


def test_a_step_proposes_distinct_trials_from_the_tree(tmp_path: Path) -> None:
    run, context = _Run(tmp_path), _context()
    first = TrialRecord(trial_id="t01", index=1, proposal=run.proposer.propose(context))
    more = more_proposals(run, context, first, 4, reserved_s=0.0)  # type: ignore[arg-type]
    batch = [first, *more]
    assert [t.trial_id for t in batch] == ["t01", "t02", "t03", "t04"]
    moves = {
        (t.proposal.recipe, t.proposal.parent, t.proposal.hyperparameters["learning_rate"]) for t in batch
    }
    assert len(moves) == 4, batch  # no move twice: each proposal saw the ones before it as pending


def test_a_step_reserves_compute_before_launch(tmp_path: Path) -> None:
    run, context = _Run(tmp_path, limit_s=250.0), _context()
    proposal = run.proposer.propose(context).model_copy(update={"estimated_cost_s": 100.0})
    first = TrialRecord(trial_id="t01", index=1, proposal=proposal)
    more = more_proposals(run, context, first, 4, reserved_s=100.0)  # type: ignore[arg-type]
    # 250 s of compute: t01's 100 s reserved, room for one more estimated like it, not a third
    costs = [t.proposal.estimated_cost_s for t in more]
    assert sum(c or 0.0 for c in costs) + 100.0 <= 250.0, costs
    assert len(more) <= 1


def test_finished_outcome_is_read_back_only_when_complete(tmp_path: Path) -> None:
    from tasks.atomic import atomic_write_json

    paths = RunPaths(tmp_path, "r")
    record = TrialRecord(trial_id="t01", index=1, proposal=Proposal(hypothesis="h", recipe="sft"))
    assert finished(paths, record) is None  # nothing on disk: it trains
    checkpoint = paths.trial_output("t01")
    done = record.model_copy(
        update={"status": "succeeded", "checkpoint": str(checkpoint.relative_to(paths.run_dir))}
    )
    atomic_write_json(outcome_file(paths, "t01"), done.model_dump(mode="json"))
    assert finished(paths, record) is None  # its checkpoint is gone: train again
    checkpoint.mkdir(parents=True)
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    done.checkpoint_sha256 = untrusted.tree_digest(checkpoint)  # sealed when the trial ended
    atomic_write_json(outcome_file(paths, "t01"), done.model_dump(mode="json"))
    assert finished(paths, record) == done
    (checkpoint / "model.safetensors").write_bytes(b"changed")
    assert finished(paths, record) is None  # changed since it was sealed: never used, trained again
    (checkpoint / "model.safetensors").write_bytes(b"weights")
    other = record.model_copy(update={"proposal": Proposal(hypothesis="h", recipe="grpo")})
    assert finished(paths, other) is None  # another proposal under the same id: not this trial's outcome


# ---- the real CLI ---------------------------------------------------------------------------------------------
# four trials, two at a time, from the tree: it branches, so two of its trials can train at once (the built-in line
# policy's trials continue each other, one after another, with probes beside them only on larger budgets)
K2 = [*(a if a != "2" else "4" for a in ARGS), "--trial-concurrency", "2", "--proposer", "tree"]


@pytest.fixture(scope="module")
def reference_k2(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> dict[str, Any]:
    import shutil

    home = tmp_path_factory.mktemp("ref-k2")
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    result = _run(home, "run", "--run-id", "ref", *K2)
    assert result.returncode == 0, result.stdout + result.stderr
    run_dir = home / "runs" / "ref"
    return {
        "state": read_state(run_dir),
        "submissions": _submissions(run_dir),
        "log": (run_dir / "run.log").read_text(),
    }


@pytest.mark.slow
def test_four_trials_two_at_a_time(reference_k2: dict[str, Any]) -> None:
    state = reference_k2["state"]
    assert state["status"] == "finished"
    trials = state["trials"]
    assert [t["trial_id"] for t in trials] == ["t01", "t02", "t03", "t04"]
    moves = {
        (t["proposal"]["recipe"], t["proposal"]["parent"], str(t["proposal"]["hyperparameters"]))
        for t in trials
    }
    assert len(moves) == 4  # four distinct trials
    succeeded = [t for t in trials if t["status"] == "succeeded"]
    assert state["submissions"] == len(succeeded) == len(reference_k2["submissions"])  # --submit all
    assert "t01, t02: training 2 at once" in reference_k2["log"]
    assert "t03, t04: training 2 at once" in reference_k2["log"]
    assert not state.get("queue")


@pytest.mark.slow
def test_kill_9_mid_concurrent_step_then_resume(reference_k2: dict[str, Any], tiny_model_home: Path) -> None:
    """Killed at trained:1 (t01's outcome is on disk, t02 may still train, the step is not checkpointed), then,
    resumed, at submit:2 (t02, the queued trial, graded, not yet recorded). Resumed again, the run equals the
    uninterrupted one: no trial trained or submitted twice."""
    home = tiny_model_home
    run_dir = home / "runs" / "k2-crash"
    t01_log = run_dir / "trials" / "t01" / "log.txt"
    t01_before = 0
    for attempt, failpoint in enumerate(["trained:1", "submit:2"]):
        command = ["run", "--run-id", "k2-crash", *K2] if attempt == 0 else ["resume", "k2-crash"]
        crashed = _run(home, *command, RLLOOP_FAILPOINT=failpoint)
        assert crashed.returncode == -signal.SIGKILL, failpoint + crashed.stdout + crashed.stderr
        _assert_nothing_left(run_dir)
        if attempt == 0:
            t01_before = t01_log.stat().st_mtime_ns

    resumed = _run(home, "resume", "k2-crash")
    assert resumed.returncode == 0, resumed.stdout + resumed.stderr
    state = read_state(run_dir)
    assert state["status"] == "finished"
    assert _summary(state) == _summary(reference_k2["state"])
    assert state["submissions"] == reference_k2["state"]["submissions"]
    assert _submissions(run_dir) == reference_k2["submissions"]  # nothing graded twice
    assert t01_log.stat().st_mtime_ns == t01_before  # t01 finished before the first kill: never trained again
    assert "t01 finished before the interruption: not trained again" in (run_dir / "run.log").read_text()


def test_concurrent_trials_get_different_gpus_and_ray_keeps_its_own_cpus(tmp_path: Path) -> None:
    from sandbox.devices import DevicePlan

    plan = DevicePlan(gpus=("0", "1", "2", "3"), trial_gpus=1, grader_gpu=None)
    request = SandboxRequest(command=["true"], workspace=tmp_path, log_path=tmp_path / "l", gpus=[2])
    slots = [split_request(request, 2, s, plan).gpus for s in (0, 1)]
    assert slots == [[2], [3]]  # slot 0 keeps the free device the plan chose, slot 1 the next
    on_ray = split_request(request, 2, 1, plan, schedules_resources=True)
    assert on_ray.cpus is None and on_ray.gpus == [2]  # ray's scheduler places it and hands it its GPUs
