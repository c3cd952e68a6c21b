"""MLflow tracking against a real SQLite store: parent and nested runs, idempotent on resume."""

from __future__ import annotations

from pathlib import Path

import torch
from mlflow import MlflowClient

from agent.environment import environment_record, flat_params
from agent.proposers.base import Proposal, TrialRecord
from agent.tracking import Tracker


def test_parent_and_trials_are_idempotent(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    parent = tracker.start_parent("run-1", "arith", {"loop_n": 2})
    assert (
        tracker.start_parent("run-1", "arith", {"loop_n": 2}) == parent
    )  # resume continues, never duplicates
    tracker.log_metrics(parent, {"baseline_score": 0.25}, step=0)
    tracker.log_metrics(parent, {"score": 0.5, "best_score": 0.5, "submission_count": 1}, step=1)
    log = tmp_path / "log.txt"
    log.write_text("step 1 loss 0.5\n")
    trial = TrialRecord(
        trial_id="t01",
        index=1,
        proposal=Proposal(hypothesis="sft helps", recipe="sft", hyperparameters={"learning_rate": 1e-3}),
        status="succeeded",
        score=0.5,
        train_metrics={"train_loss": 0.4},
        duration_s=12.0,
    )
    child = tracker.log_trial(parent, "run-1", "arith", trial, [log])
    assert tracker.log_trial(parent, "run-1", "arith", trial, [log]) == child
    tracker.finish(parent, success=True)

    client = MlflowClient(tracking_uri=uri)
    experiment = client.get_experiment_by_name("rlloop/arith")
    assert experiment is not None
    runs = client.search_runs([experiment.experiment_id])
    assert len(runs) == 2
    child_run = client.get_run(child)
    assert child_run.data.tags["mlflow.parentRunId"] == parent
    assert child_run.data.params["hp.learning_rate"] == "0.001"
    assert child_run.data.metrics["score"] == 0.5
    assert [a.path for a in client.list_artifacts(child)] == ["log.txt"]
    history = client.get_metric_history(parent, "score")
    assert [(m.step, m.value) for m in history] == [(1, 0.5)]
    assert client.get_run(parent).info.status == "FINISHED"


def test_a_flagged_submission_is_tagged_on_its_trial_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    parent = tracker.start_parent("run-2", "arith", {})
    evidence = "40 of 40 hidden test items found in trials/t02/data.txt (first: '37+58=95')"
    flagged = TrialRecord(
        trial_id="t02",
        index=2,
        proposal=Proposal(hypothesis="h", recipe="sft"),
        status="succeeded",
        score=0.9,
        grading={"flagged": True, "flags": [{"check": "contamination", "evidence": evidence}]},
    )
    honest = flagged.model_copy(update={"trial_id": "t01", "grading": {"flagged": False, "flags": []}})
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(tracker.log_trial(parent, "run-2", "arith", flagged, []))
    assert run.data.tags["rlloop.flagged"] == "contamination"
    assert run.data.tags["rlloop.flag.contamination"] == evidence
    assert run.data.metrics["flagged"] == 1.0
    clean = client.get_run(tracker.log_trial(parent, "run-2", "arith", honest, []))
    assert "rlloop.flagged" not in clean.data.tags and clean.data.metrics["flagged"] == 0.0


def test_a_new_parent_records_the_environment(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    parent = tracker.start_parent("run-3", "arith", {"loop_n": 2})
    params = MlflowClient(tracking_uri=uri).get_run(parent).data.params
    assert params["loop_n"] == "2"
    assert params["env.packages.torch"] == torch.__version__
    assert params["env.torch_threads"] == str(torch.get_num_threads())
    assert {"env.python", "env.cpu_count", "env.cpu_capability", "env.cuda_available"} <= params.keys()


def test_environment_record_names_versions_threads_and_devices() -> None:
    record = environment_record()
    packages = record["packages"]
    assert isinstance(packages, dict)
    assert {"torch", "transformers", "trl", "tokenizers"} <= packages.keys() and packages["torch"]
    assert record["torch_threads"] == torch.get_num_threads()
    assert record["torch_interop_threads"] == torch.get_num_interop_threads()
    assert record["cpu_count"] and record["python"] and record["platform"]
    assert record["cuda_available"] == torch.cuda.is_available()
    assert flat_params({"a": {"b": 1}, "c": None}) == {"env.a.b": "1", "env.c": "None"}
