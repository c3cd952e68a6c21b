"""MLflow tracking against a real SQLite store: parent and nested runs, idempotent on resume; node traces linked to
trial runs; the experiment kind; a lean `rlloop ui`."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
import torch
from mlflow import MlflowClient

from agent.core.records import Proposal, TrialRecord
from agent.tracking.environment import environment_record, flat_params
from agent.tracking.links import review_links
from agent.tracking.traces import child_span, traced_nodes
from agent.tracking.tracker import EXPERIMENT_KIND_TAG, NODE_TAG, TRIAL_TAG, Tracker


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


def test_experiments_open_on_their_runs_view(tmp_path: Path) -> None:
    """MLflow 3 opens an experiment holding traces on its GenAI overview unless its kind tag says otherwise."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("rlloop/old")  # made before the tag existed, then guessed by the UI
    client.set_experiment_tag(old, EXPERIMENT_KIND_TAG, "genai_development_inferred")
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    new = tracker.experiment_id("arith")
    assert client.get_experiment(new).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    assert tracker.experiment_id("old") == old
    assert client.get_experiment(old).tags[EXPERIMENT_KIND_TAG] == "custom_model_development"
    client.set_experiment_tag(new, EXPERIMENT_KIND_TAG, "finetuning")  # a person's choice is kept
    tracker.experiment_id("arith")
    assert client.get_experiment(new).tags[EXPERIMENT_KIND_TAG] == "finetuning"
    # the review view (training runs, the columns a reviewer compares) is saved on new and old experiments alike;
    # the run page links to it with the GenAI switch off (tests/agent/service/test_run_page.py opens it in Chromium)
    view_tag = "mlflow.sharedViewState.rlloop-review"
    for experiment in (new, old):
        columns = json.loads(client.get_experiment(experiment).tags[view_tag])["selectedColumns"]
        assert "metrics.`baseline_score`" in columns and "params.`recipe`" in columns
    link = "http://ui/#/experiments/{}/runs?workflowType=machine_learning&viewStateShareKey=rlloop-review"
    assert sorted(review_links(tmp_path, "http://ui")) == [
        ("rlloop/arith", link.format(new)),
        ("rlloop/old", link.format(old)),
    ]


class _Nodes:
    """The loop's node class in miniature: what `traced_nodes` needs (tracker, paths, config) and two nodes."""

    def __init__(self, tracker: Tracker, parent: str) -> None:
        self.tracker, self.parent = tracker, parent
        self.paths = SimpleNamespace(run_id="run-4")
        self.config = SimpleNamespace(benchmark="arith")

    def propose(self, state: SimpleNamespace) -> dict[str, Any]:
        with child_span("llm:propose", "CHAT_MODEL", {"messages": ["hi"]}) as span:
            assert span is not None  # inside the node's trace
        proposal = Proposal(hypothesis="h", recipe="sft")
        return {"current": TrialRecord(trial_id="t01", index=1, proposal=proposal)}

    def finish(self, state: SimpleNamespace) -> dict[str, Any]:
        return {"status": "finished"}


def test_each_node_is_a_trace_linked_to_its_trials_run(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    parent = tracker.start_parent("run-4", "arith", {})
    nodes = traced_nodes(_Nodes)(tracker, parent)
    state = SimpleNamespace(
        mlflow_parent=parent, trials=[], current=None
    )  # the loop's state, as a node reads it
    update = nodes.propose(state)
    nodes.finish(SimpleNamespace(**{**vars(state), **update}))
    with child_span("outside", "TOOL", {}) as outside:
        assert outside is None  # no trace open: nothing recorded

    client = MlflowClient(tracking_uri=uri)
    trial_run = tracker.trial_run(parent, "run-4", "arith", "t01")
    experiments = [tracker.experiment_id("arith")]
    traces = client.search_traces(locations=experiments, run_id=trial_run)
    assert [t.info.tags[NODE_TAG] for t in traces] == ["propose"]
    assert [s.name for s in traces[0].data.spans] == ["node:propose", "llm:propose"]
    assert traces[0].info.tags[TRIAL_TAG] == "t01"
    assert [t.info.tags[NODE_TAG] for t in client.search_traces(locations=experiments, run_id=parent)] == [
        "finish"
    ]

    # the run opened early for the traces is filled, once, when the trial is recorded
    trial = TrialRecord(
        trial_id="t01", index=1, proposal=Proposal(hypothesis="h", recipe="sft"), status="failed"
    )
    assert tracker.log_trial(parent, "run-4", "arith", trial, []) == trial_run
    assert tracker.log_trial(parent, "run-4", "arith", trial, []) == trial_run
    filled = client.get_run(trial_run)
    assert filled.data.tags["rlloop.status"] == "failed" and filled.info.status == "FAILED"
    assert len(client.search_runs([filled.info.experiment_id])) == 2


@pytest.mark.slow
def test_rlloop_ui_is_one_lean_server_process(tmp_path: Path) -> None:
    """`rlloop ui`: one uvicorn worker and no job runners (MLflow's default is 4 workers and 7 huey consumers)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    proc = subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "ui", "--home", str(tmp_path), "--port", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + 120
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/health", timeout=2) as answer:
                    assert answer.status == 200
                break
            except OSError:
                assert proc.poll() is None and time.monotonic() < deadline, proc.stderr and proc.stderr.read()
                time.sleep(0.5)
        time.sleep(3)  # job runners, when enabled, start after the server answers
        commands = [_cmdline(pid) for pid in _tree(proc.pid)]
        servers = [c for c in commands if "uvicorn" in c or "gunicorn" in c]
        assert len(servers) == 1, commands
        assert not [c for c in commands if "huey" in c or "_job_runner" in c or "multiprocessing" in c], (
            commands
        )
        assert any("--workers 1" in c for c in commands)
    finally:
        proc.terminate()
        proc.wait(timeout=30)


def _tree(pid: int) -> list[int]:
    found = [pid]
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                parent = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError):
                continue
            if parent == pid:
                found += _tree(int(entry))
    return found


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_text().replace("\0", " ")
    except OSError:
        return ""


def test_trial_runs_carry_their_outcome_and_scores_as_results_csv_writes_them(tmp_path: Path) -> None:
    """The review view's trial rows: the public score of a graded trial, the outcome in the run page's words, and
    scores to four decimals (a valid score of 19/30 is 0.6333, not 0.6333333333333333); a trial the run's end grades
    after it was recorded (its best, kept back mid-run) becomes graded with its score."""
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    tracker = Tracker(uri, tmp_path / "mlartifacts")
    parent = tracker.start_parent("run-6", "arith", {}, environment={})
    kept = TrialRecord(
        trial_id="t01",
        index=1,
        proposal=Proposal(hypothesis="h", recipe="sft"),
        status="succeeded",
        valid_score=19 / 30,
        duration_s=1.0,
    )
    failed = TrialRecord(
        trial_id="t02", index=2, proposal=Proposal(hypothesis="h", recipe="sft"), status="failed", error="oom"
    )
    child = tracker.log_trial(parent, "run-6", "arith", kept, [])
    other = tracker.log_trial(parent, "run-6", "arith", failed, [])
    tracker.log_metrics(parent, {"best_score": 2 / 3, "submission_count": 1}, step=1)
    client = MlflowClient(tracking_uri=uri)
    run = client.get_run(child)
    assert run.data.tags["rlloop.outcome"] == "kept back" and "score" not in run.data.metrics
    assert run.data.metrics["valid_score"] == 0.6333
    assert client.get_run(other).data.tags["rlloop.outcome"] == "failed"
    assert client.get_run(parent).data.metrics == {"best_score": 0.6667, "submission_count": 1.0}
    graded = kept.model_copy(update={"score": 0.7123456, "submission_id": 1})
    tracker.mark_graded(parent, "run-6", "arith", graded)
    run = client.get_run(child)
    assert run.data.tags["rlloop.outcome"] == "graded" and run.data.metrics["score"] == 0.7123


def test_an_older_review_view_is_rewritten_with_the_trial_columns_first(tmp_path: Path) -> None:
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = MlflowClient(tracking_uri=uri)
    old = client.create_experiment("rlloop/arith")
    view_tag = "mlflow.sharedViewState.rlloop-review"
    client.set_experiment_tag(old, view_tag, json.dumps({"selectedColumns": ["metrics.`best_score`"]}))
    assert Tracker(uri, tmp_path / "mlartifacts").experiment_id("arith") == old
    state = json.loads(client.get_experiment(old).tags[view_tag])
    assert state["selectedColumns"][:2] == ["tags.`rlloop.outcome`", "metrics.`score`"]
    assert state["columnOrder"][2:4] == ["tags.`rlloop.outcome`", "metrics.`score`"]  # after name and date
