"""MLflow tracking: a parent run per research run, a nested run per trial, idempotent so resume never duplicates.

Uses `MlflowClient` with explicit run ids rather than the fluent API's global active run, so one process can track
several runs and a resumed run continues its parent instead of opening a new one.
"""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Any

from agent.environment import environment_record, flat_params
from agent.proposers.base import TrialRecord

log = logging.getLogger(__name__)

PARENT_TAG = "rlloop.run_id"
TRIAL_TAG = "rlloop.trial_id"


def _quiet_mlflow() -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    for name in ("mlflow", "mlflow.store.db.utils", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


class Tracker:
    """Writes a research run's story to MLflow: params, baseline, every submission's score, trials."""

    def __init__(self, tracking_uri: str, artifact_root: Path) -> None:
        _quiet_mlflow()
        from mlflow import MlflowClient

        _quiet_mlflow()  # mlflow sets its own logger levels on import
        self.client = MlflowClient(tracking_uri=tracking_uri)
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root

    def experiment_id(self, benchmark: str) -> str:
        name = f"rlloop/{benchmark}"
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            return str(experiment.experiment_id)
        self.artifact_root.mkdir(parents=True, exist_ok=True)
        try:
            return str(
                self.client.create_experiment(name, artifact_location=(self.artifact_root / name).as_uri())
            )
        except Exception:  # created concurrently by another run
            experiment = self.client.get_experiment_by_name(name)
            if experiment is None:
                raise
            return str(experiment.experiment_id)

    def start_parent(
        self,
        run_id: str,
        benchmark: str,
        params: dict[str, Any],
        environment: dict[str, object] | None = None,
    ) -> str:
        """Return the parent run for this research run, creating it only if it does not exist yet.

        A new parent also records the environment (`env.*` params: versions, threads, CPU; this process's when not
        given), since the same seed repeats its numbers only under the same libraries and kernels.
        """
        experiment_id = self.experiment_id(benchmark)
        found = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{run_id}' and tags.`rlloop.kind` = 'parent'",
        )
        if found:
            parent = found[0].info.run_id
            self.client.set_terminated(parent, status="RUNNING")
            return str(parent)
        run = self.client.create_run(
            experiment_id, run_name=run_id, tags={PARENT_TAG: run_id, "rlloop.kind": "parent"}
        )
        record = environment if environment is not None else environment_record()
        self.log_params(run.info.run_id, {**params, **flat_params(record)})
        return str(run.info.run_id)

    def log_params(self, run: str, params: dict[str, Any]) -> None:
        """Params in batches (MLflow takes at most 100 per call), each value cut to MLflow's 500 characters."""
        from mlflow.entities import Param

        items = [Param(key, str(value)[:500]) for key, value in params.items()]
        for start in range(0, len(items), 100):
            self.client.log_batch(run, params=items[start : start + 100])

    def log_metrics(self, parent: str, metrics: dict[str, float], step: int = 0) -> None:
        for key, value in metrics.items():
            self.client.log_metric(parent, key, float(value), step=step)

    def has_metric_at(self, parent: str, key: str, step: int) -> bool:
        """True when `key` was already logged at `step` (a resumed run re-running its record step)."""
        return any(m.step == step for m in self.client.get_metric_history(parent, key))

    def log_trial(
        self,
        parent: str,
        run_id: str,
        benchmark: str,
        trial: TrialRecord,
        artifacts: list[Path],
        extra_tags: dict[str, str] | None = None,
    ) -> str:
        """Create (or find, on resume) the trial's nested run and fill it. Returns its MLflow run id."""
        experiment_id = self.experiment_id(benchmark)
        found = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{run_id}' and tags.`{TRIAL_TAG}` = '{trial.trial_id}'",
        )
        if found:
            return str(found[0].info.run_id)
        tags = {
            PARENT_TAG: run_id,
            TRIAL_TAG: trial.trial_id,
            "mlflow.parentRunId": parent,
            "rlloop.kind": "trial",
            "rlloop.status": trial.status,
            "rlloop.hypothesis": trial.proposal.hypothesis[:5000],
            **(extra_tags or {}),
        }
        if trial.error:
            tags["rlloop.error"] = trial.error[:5000]
        flags = trial.grading.get("flags") or []
        if (
            flags
        ):  # the grader found test items in the trial's files, or weights that copy the base / a submission
            tags["rlloop.flagged"] = ",".join(str(f.get("check")) for f in flags)
            for flag in flags:
                tags[f"rlloop.flag.{flag.get('check')}"] = str(flag.get("evidence"))[:5000]
        child = self.client.create_run(experiment_id, run_name=trial.trial_id, tags=tags).info.run_id
        params: dict[str, Any] = {
            "recipe": trial.proposal.recipe,
            "init_from": trial.proposal.init_from or "base",
        }
        params.update({f"hp.{k}": v for k, v in trial.proposal.hyperparameters.items()})
        self.log_params(child, params)
        metrics: dict[str, float] = {
            f"train.{k}": float(v) for k, v in trial.train_metrics.items() if isinstance(v, int | float)
        }
        metrics["duration_s"] = trial.duration_s
        if trial.score is not None:
            metrics["score"] = trial.score
            metrics["flagged"] = 1.0 if flags else 0.0
        for key, value in metrics.items():
            self.client.log_metric(child, key, float(value))
        for path in artifacts:
            if path.is_file():
                self.client.log_artifact(child, str(path))
        self.client.set_terminated(child, status="FINISHED" if trial.status == "succeeded" else "FAILED")
        return str(child)

    def log_artifact(self, parent: str, path: Path) -> None:
        if path.is_file():
            self.client.log_artifact(parent, str(path))

    def set_tags(self, parent: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(parent, key, value)

    def finish(self, parent: str, success: bool) -> None:
        self.client.set_terminated(parent, status="FINISHED" if success else "FAILED")

    def run_url(self, parent: str, ui_base: str = "http://127.0.0.1:5000") -> str:
        run = self.client.get_run(parent)
        return f"{ui_base}/#/experiments/{run.info.experiment_id}/runs/{parent}"
