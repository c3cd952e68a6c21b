"""MLflow tracking: a parent run per research run, a nested run per trial, idempotent so resume never duplicates.

Uses `MlflowClient` with explicit run ids rather than the fluent API's global active run, so one process can track
several runs and a resumed run continues its parent instead of opening a new one. Traces (`agent.tracking.traces`)
are written synchronously (a kill -9 loses at most the node in flight) and a tracing failure is logged, never
raised.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agent.core import TrialRecord
from agent.tracking.environment import environment_record, flat_params
from agent.tracking.review import OUTCOME_TAG, has_review_view, review_view_tag, run_page_url
from sandbox import untrusted
from tasks import once

log = logging.getLogger(__name__)

PARENT_TAG = "rlloop.run_id"
TRIAL_TAG = "rlloop.trial_id"
NODE_TAG = "rlloop.node"
# The experiment's kind (MLflow's own value for model training), for the MLflow versions and tools that read it
EXPERIMENT_KIND_TAG = "mlflow.experimentKind"
EXPERIMENT_KIND = "custom_model_development"
SCORE_DIGITS = 4  # scores go to MLflow as results.csv writes them: 0.6333, not 0.6333333333333333


def _quiet_mlflow() -> None:
    os.environ.setdefault("MLFLOW_ENABLE_ARTIFACTS_PROGRESS_BAR", "false")
    os.environ.setdefault(
        "MLFLOW_ENABLE_ASYNC_TRACE_LOGGING", "false"
    )  # a trace is stored when its span ends
    for name in ("mlflow", "mlflow.store.db.utils", "alembic", "alembic.runtime.migration"):
        logging.getLogger(name).setLevel(logging.WARNING)


def open_client(tracking_uri: str) -> Any:
    """An MlflowClient on `tracking_uri`. A SQLite store is created and migrated on first use; two processes doing
    that at once corrupt it (alembic: "Online migration expected to match one row"), so it is done by one process
    at a time, under a lock beside the database (`tasks.once`); the others wait, then find it made."""
    _quiet_mlflow()
    from mlflow import MlflowClient

    _quiet_mlflow()  # mlflow sets its own logger levels on import
    database = sqlite_path(tracking_uri)
    if database is None:
        return MlflowClient(tracking_uri=tracking_uri)
    database.parent.mkdir(parents=True, exist_ok=True)
    with once.exclusive(database.with_name(database.name + ".lock")):
        client = MlflowClient(tracking_uri=tracking_uri)
        client.search_experiments(max_results=1)  # the store is made (and migrated) here, inside the lock
    return client


def sqlite_path(tracking_uri: str) -> Path | None:
    """The database file of a `sqlite:///` tracking URI, else None."""
    prefix = "sqlite:///"
    return Path(tracking_uri[len(prefix) :]) if tracking_uri.startswith(prefix) else None


class Tracker:
    """Writes a research run's story to MLflow: params, baseline, every submission's score, trials."""

    def __init__(self, tracking_uri: str, artifact_root: Path) -> None:
        import mlflow

        self.client = open_client(tracking_uri)
        self.tracking_uri = tracking_uri
        self.artifact_root = artifact_root
        mlflow.set_tracking_uri(tracking_uri)  # where traces go (the span exporter reads the global URI)

    def experiment_id(self, benchmark: str) -> str:
        name = f"rlloop/{benchmark}"
        experiment = self.client.get_experiment_by_name(name)
        if experiment is not None:
            kind = experiment.tags.get(EXPERIMENT_KIND_TAG, "")
            if not kind or kind.endswith("inferred") or kind == "no_inferred_type":  # ours, or the UI's guess
                self.client.set_experiment_tag(experiment.experiment_id, EXPERIMENT_KIND_TAG, EXPERIMENT_KIND)
            if not has_review_view(experiment.tags):
                self.save_review_view(str(experiment.experiment_id))
            return str(experiment.experiment_id)
        self.artifact_root.mkdir(parents=True, exist_ok=True)
        try:
            return str(
                self.client.create_experiment(
                    name,
                    artifact_location=(self.artifact_root / name).as_uri(),
                    tags={EXPERIMENT_KIND_TAG: EXPERIMENT_KIND, **review_view_tag()},
                )
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
            self.client.log_metric(parent, key, shown(key, value), step=step)

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
        """Create (or find: on resume, or opened early by `trial_run` for its traces) the trial's nested run and fill
        it once. Returns its MLflow run id."""
        experiment_id = self.experiment_id(benchmark)
        found = self._find_trial(experiment_id, run_id, trial.trial_id)
        if found is not None and "rlloop.status" in found.data.tags:  # already filled
            return str(found.info.run_id)
        tags = {
            "rlloop.hypothesis": trial.proposal.hypothesis[:5000],
            **(extra_tags or {}),
        }
        if trial.error:
            tags["rlloop.error"] = trial.error[:5000]
        if trial.submission_note:
            tags["rlloop.submission"] = trial.submission_note[:5000]
        flags = trial.grading.get("flags") or []
        if (
            flags
        ):  # the grader found test items in the trial's files, or weights that copy the base / a submission
            tags["rlloop.flagged"] = ",".join(str(f.get("check")) for f in flags)
            for flag in flags:
                tags[f"rlloop.flag.{flag.get('check')}"] = str(flag.get("evidence"))[:5000]
        if found is not None:
            child = found.info.run_id
        else:
            child = self.trial_run(parent, run_id, benchmark, trial.trial_id)
        from mlflow.entities import RunTag

        self.client.log_batch(child, tags=[RunTag(key, text) for key, text in tags.items()])
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
        metrics["wall_s"] = trial.wall_s  # what the trial cost: its sandbox and its validation
        metrics["validation_s"] = trial.validation_s
        for key in (
            "valid_score",
            "valid_ci_low",
            "valid_ci_high",
        ):  # the free score on the public valid split
            if getattr(trial, key) is not None:
                metrics[key] = getattr(trial, key)
        if trial.score is not None:
            metrics["score"] = trial.score
            metrics["flagged"] = 1.0 if flags else 0.0
        for key, value in metrics.items():
            self.client.log_metric(child, key, shown(key, value))
        for path in artifacts:  # the host's records of the trial; a link or a special file is never logged
            if untrusted.is_file(path.parent, path.name):
                self.client.log_artifact(child, str(path))
        self.client.set_tag(child, OUTCOME_TAG, trial_outcome(trial))
        self.client.set_tag(child, "rlloop.status", trial.status)  # last: marks the run filled
        self.client.set_terminated(child, status="FINISHED" if trial.status == "succeeded" else "FAILED")
        return str(child)

    def _find_trial(self, experiment_id: str, run_id: str, trial_id: str) -> Any:
        found = self.client.search_runs(
            [experiment_id],
            filter_string=f"tags.`{PARENT_TAG}` = '{run_id}' and tags.`{TRIAL_TAG}` = '{trial_id}'",
        )
        return found[0] if found else None

    def trial_run(self, parent: str, run_id: str, benchmark: str, trial_id: str) -> str:
        """The trial's nested run, created (empty, running) if it does not exist yet: its traces link to it from the
        first node on; `log_trial` fills it when the trial is recorded."""
        experiment_id = self.experiment_id(benchmark)
        found = self._find_trial(experiment_id, run_id, trial_id)
        if found is not None:
            return str(found.info.run_id)
        tags = {PARENT_TAG: run_id, TRIAL_TAG: trial_id, "mlflow.parentRunId": parent, "rlloop.kind": "trial"}
        return str(self.client.create_run(experiment_id, run_name=trial_id, tags=tags).info.run_id)

    @contextlib.contextmanager
    def node_trace(
        self, node: str, *, run_id: str, benchmark: str, trial_id: str | None, inputs: dict[str, Any]
    ) -> Iterator[Any]:
        """One graph node as an MLflow trace (the root span); LLM and tool calls inside it become its child spans.
        Yields the live span, or None when tracing is unavailable. `link` the trace to a run once it is known."""
        span = None
        try:
            import mlflow
            from mlflow.entities.trace_location import MlflowExperimentLocation

            location = MlflowExperimentLocation(experiment_id=self.experiment_id(benchmark))
            opened = mlflow.start_span(f"node:{node}", span_type="CHAIN", trace_destination=location)
            span = opened.__enter__()
            span.set_inputs(inputs)
            tags = {PARENT_TAG: run_id, NODE_TAG: node, **({TRIAL_TAG: trial_id} if trial_id else {})}
            mlflow.update_current_trace(tags=tags)
        except Exception as exc:  # tracing is for review; a run never fails over it
            log.warning("could not start the MLflow trace of node %s: %s", node, exc)
            span, opened = None, None
        try:
            yield span
        except BaseException as exc:
            if opened is not None:
                opened.__exit__(type(exc), exc, exc.__traceback__)
            raise
        if opened is not None:
            try:
                opened.__exit__(None, None, None)
            except Exception as exc:
                log.warning("could not store the MLflow trace of node %s: %s", node, exc)

    def link(self, trace_id: str, mlflow_run: str) -> None:
        """Show a trace on a run's page (MLflow's trace-to-run association)."""
        try:
            self.client.link_traces_to_run([trace_id], mlflow_run)
        except Exception as exc:
            log.warning("could not link trace %s to run %s: %s", trace_id, mlflow_run, exc)

    def log_artifact(self, parent: str, path: Path) -> None:
        if path.is_file():
            self.client.log_artifact(parent, str(path))

    def set_tags(self, parent: str, tags: dict[str, str]) -> None:
        for key, value in tags.items():
            self.client.set_tag(parent, key, value)

    def finish(self, parent: str, success: bool) -> None:
        self.client.set_terminated(parent, status="FINISHED" if success else "FAILED")

    def run_url(self, parent: str, ui_base: str = "http://127.0.0.1:5000") -> str:
        """The parent run's MLflow page with the GenAI switch off: without it a fresh browser shows the run under
        the GenAI pages (its experiment link going to "Evaluation runs", not the training runs)."""
        run = self.client.get_run(parent)
        return run_page_url(ui_base, str(run.info.experiment_id), parent)

    def save_review_view(self, experiment_id: str) -> None:
        """(Re)write the experiment's review view (the tag `runs_url` opens)."""
        for key, value in review_view_tag().items():
            self.client.set_experiment_tag(experiment_id, key, value)

    def mark_graded(self, parent: str, run_id: str, benchmark: str, trial: TrialRecord) -> None:
        """A trial graded after it was recorded (a run's end grades its best kept-back checkpoint): its run gets
        the public score and the outcome it now has."""
        experiment_id = self.experiment_id(benchmark)
        found = self._find_trial(experiment_id, run_id, trial.trial_id)
        if found is None or trial.score is None:
            return
        self.client.log_metric(found.info.run_id, "score", shown("score", trial.score))
        self.client.set_tag(found.info.run_id, OUTCOME_TAG, trial_outcome(trial))


def shown(key: str, value: float) -> float:
    """A metric as MLflow's tables should show it: scores (and their CIs, gains) to SCORE_DIGITS decimals."""
    if key.endswith(("score", "_ci_low", "_ci_high", "improvement")):
        return round(float(value), SCORE_DIGITS)
    return float(value)


def trial_outcome(trial: TrialRecord) -> str:
    """What happened to a trial, in the run page's words: graded (sent to the grader), kept back (trained, not
    sent), failed, rejected."""
    if trial.status == "succeeded":
        return "graded" if trial.score is not None or trial.submission_id is not None else "kept back"
    if trial.status in ("failed", "skipped"):
        return "failed"
    return str(trial.status)
