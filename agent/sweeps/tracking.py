"""MLflow grouping: one parent run per sweep (experiment `rlloop/sweeps`); every research run of the sweep is
tagged `rlloop.sweep_id` (and its agent and seed), so the MLflow UI can filter and compare them side by side."""

from __future__ import annotations

import contextlib
import json
from pathlib import Path
from typing import Any

from agent.status import read_state
from agent.sweeps.manifest import Entry, Manifest

EXPERIMENT = "rlloop/sweeps"
SWEEP_TAG = "rlloop.sweep_id"


class SweepTracker:
    def __init__(self, home: Path) -> None:
        from agent.tracking import open_client

        self.home = home
        self.client = open_client(f"sqlite:///{(home / 'mlflow.db').resolve()}")

    def _experiment(self) -> str:
        found = self.client.get_experiment_by_name(EXPERIMENT)
        if found is not None:
            return str(found.experiment_id)
        root = self.home / "mlartifacts"
        root.mkdir(parents=True, exist_ok=True)
        try:
            return str(
                self.client.create_experiment(EXPERIMENT, artifact_location=(root / EXPERIMENT).as_uri())
            )
        except Exception:  # created concurrently
            again = self.client.get_experiment_by_name(EXPERIMENT)
            if again is None:
                raise
            return str(again.experiment_id)

    def start(self, manifest: Manifest) -> str:
        """The sweep's parent run: found by its tag on resume, else created with the sweep's settings as params."""
        experiment = self._experiment()
        found = self.client.search_runs(
            [experiment], filter_string=f"tags.`{SWEEP_TAG}` = '{manifest.sweep_id}'"
        )
        if found:
            run_id = str(found[0].info.run_id)
            self.client.set_terminated(run_id, status="RUNNING")
            return run_id
        run = self.client.create_run(
            experiment,
            run_name=manifest.sweep_id,
            tags={SWEEP_TAG: manifest.sweep_id, "rlloop.kind": "sweep"},
        )
        spec = manifest.spec.model_dump(mode="json")
        for key in ("benchmarks", "base_models", "agents", "seeds", "timeout", "loop_n", "concurrency"):
            self.client.log_param(run.info.run_id, key, str(spec[key])[:500])
        self.client.log_param(run.info.run_id, "runs", len(manifest.entries))
        return str(run.info.run_id)

    def tag_run(self, manifest: Manifest, entry: Entry) -> str | None:
        """Tag the research run's own MLflow parent with the sweep; returns that MLflow run id."""
        parent = research_parent(self.home / "runs" / entry.run_id)
        if parent is None:
            return None
        combination = entry.combination
        tags = {
            SWEEP_TAG: manifest.sweep_id,
            "rlloop.sweep_agent": combination.agent_label,
            "rlloop.sweep_seed": str(combination.seed),
            "rlloop.sweep_base_model": combination.base_model,
        }
        with contextlib.suppress(Exception):
            for key, value in tags.items():
                self.client.set_tag(parent, key, value)
            if manifest.mlflow_run_id:
                self.client.set_tag(parent, "rlloop.sweep_parent", manifest.mlflow_run_id)
        return parent

    def progress(self, manifest: Manifest) -> None:
        if not manifest.mlflow_run_id:
            return
        done = sum(1 for e in manifest.entries.values() if e.status == "finished")
        failed = sum(1 for e in manifest.entries.values() if e.status == "failed")
        with contextlib.suppress(Exception):
            self.client.log_metric(manifest.mlflow_run_id, "runs_finished", done)
            self.client.log_metric(manifest.mlflow_run_id, "runs_failed", failed)

    def finish(self, manifest: Manifest, artifacts: list[Path]) -> None:
        if not manifest.mlflow_run_id:
            return
        with contextlib.suppress(Exception):
            for path in artifacts:
                if path.is_file():
                    self.client.log_artifact(manifest.mlflow_run_id, str(path))
            status = "FINISHED" if manifest.status == "finished" else "KILLED"
            self.client.set_terminated(manifest.mlflow_run_id, status=status)


def research_parent(run_dir: Path) -> str | None:
    """A research run's MLflow parent id: from the loop's state, or (external agents) from mlflow.json."""
    parent: Any = read_state(run_dir).get("mlflow_parent")
    if not parent:
        with contextlib.suppress(OSError, ValueError):
            parent = json.loads((run_dir / "mlflow.json").read_text()).get("mlflow_parent")
    return str(parent) if parent else None
