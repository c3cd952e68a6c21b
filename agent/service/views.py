"""Turns what is on disk (run.json, the checkpoint, service.json, approvals) into the API's response bodies."""

from __future__ import annotations

import json
import threading
from datetime import datetime
from pathlib import Path
from typing import Any, TypeVar

from pydantic import BaseModel

from agent.core import TrialRecord
from agent.service.records import REQUEST_NAME, WORKER_LOG_NAME, WorkerRecord
from agent.service.schemas import Links, PendingApproval, RunDetail, RunSummary, TrialView, WorkerView
from agent.service.workers import last_error
from agent.status import RunRow, read_state, run_row

View = TypeVar("View", bound=BaseModel)


def view_of(view: type[View], *sources: BaseModel, **given: Any) -> View:
    """A response body filled from the records it shows: each field of `view` not in `given` comes from the first
    source that has it. One place, so a field added to both sides is shown without a third edit."""
    values = dict(given)
    for name in view.model_fields:
        for source in sources:
            if name not in values and name in type(source).model_fields:
                values[name] = getattr(source, name)
    return view(**values)


def run_links(run_id: str, record: WorkerRecord | None, mlflow: str | None = None) -> Links:
    base = f"/runs/{run_id}"
    active = record is not None and record.state in ("queued", "running")
    return Links(
        self=base,
        cancel=f"{base}/cancel" if active else None,
        resume=f"{base}/resume" if record is not None and not active else None,
        mlflow=mlflow,
    )


def derive_status(record: WorkerRecord | None, row: RunRow | None, pending: list[str]) -> tuple[str, bool]:
    """(status, failed). The worker's lifecycle when it is queued or running; the run's own state after it."""
    if record is None:
        return (row.status if row else "unknown"), False
    if record.state == "queued":
        return "queued", False
    if record.state == "running":
        return ("waiting for approval" if pending else "running"), False
    if record.state == "cancelled":
        return "cancelled", False
    if row is None:  # the worker ended before the run wrote run.json
        if record.cancel_requested:
            return "cancelled", False
        return ("failed", True) if record.exit_code != 0 else ("finished", False)
    if row.status in ("finished", "terminated"):
        return row.status, False
    if row.status == "failed":  # the run said it died on an error (summary.json)
        return "failed", True
    if record.cancel_requested or record.exit_code in (None, 0, 130, -2, -15):
        return row.status, False
    return "failed", True


def _fresh(run_dir: Path, record: WorkerRecord | None, pending: list[str]) -> list[str]:
    """Pending proposals published by the current worker (a resumed run re-publishes its own when it gets there)."""
    if record is None or record.state != "running" or not record.started_at:
        return pending
    started = datetime.fromisoformat(record.started_at).timestamp() - 1.0
    fresh = []
    for trial_id in pending:
        try:
            if (run_dir / "approvals" / f"{trial_id}.pending.json").stat().st_mtime >= started:
                fresh.append(trial_id)
        except OSError:
            continue
    return fresh


def worker_view(run_dir: Path, record: WorkerRecord) -> WorkerView:
    return view_of(WorkerView, record, log=str(run_dir / WORKER_LOG_NAME))


def pending_view(run_id: str, trial: TrialRecord, run_active: bool) -> PendingApproval:
    """A proposal waiting for a decision, with where to POST it."""
    decide = f"/approvals/{run_id}/{trial.trial_id}"
    return view_of(
        PendingApproval, trial, trial.proposal, run_id=run_id, run_active=run_active, decide=decide
    )


def _requested(run_dir: Path) -> dict[str, Any]:
    """What the run started with (run.json), else the config the service queued it with (its request)."""
    for name, key in (("run.json", None), (REQUEST_NAME, "config")):
        try:
            data = json.loads((run_dir / name).read_text())
        except (OSError, ValueError):
            continue
        if isinstance(data, dict) and key is not None:
            data = data.get(key)
        if isinstance(data, dict):
            return data
    return {}


def run_summary(run_dir: Path, record: WorkerRecord | None, pending: list[str]) -> RunSummary | None:
    """None for folders that are neither a run nor one the service started."""
    row = run_row(run_dir)
    if row is None and record is None:
        return None
    status, failed = derive_status(record, row, _fresh(run_dir, record, pending))
    requested = _requested(run_dir) if row is None else {}
    headline = row.headline if row else None
    return RunSummary(
        run_id=run_dir.name,
        status=status,
        benchmark=row.benchmark if row else str(requested.get("benchmark", "arith")),
        base_model=row.base_model if row else str(requested.get("base_model", "tiny-arith")),
        baseline=row.baseline if row else None,
        best=row.best if row else None,
        best_trial_id=row.best_trial_id if row else None,
        private_baseline=headline.private_baseline if headline else None,
        private_best=headline.private_best if headline else None,
        headline=headline.text if headline else "",
        best_checkpoint=headline.best_checkpoint if headline else None,
        submissions=row.submissions if row else 0,
        trials=row.trials if row else 0,
        pending_approvals=pending,
        managed=record is not None,
        error=((row.error if row else None) or last_error(run_dir)) if failed else None,
        worker=worker_view(run_dir, record) if record else None,
        links=run_links(run_dir.name, record),
    )


def trial_view(data: dict[str, Any]) -> TrialView:
    trial = TrialRecord.model_validate(data)
    return view_of(TrialView, trial, trial.proposal)


class MlflowLinks:
    """Resolves an MLflow parent run id to its UI page (`agent.tracking.parent_run_url`); cached, never fatal."""

    def __init__(self, ui_base: str, artifact_root: Path) -> None:
        self.ui_base = ui_base.rstrip("/")
        self.artifact_root = artifact_root
        self._cache: dict[str, str] = {}
        self._lock = threading.Lock()

    def url(self, parent: str, tracking_uri: str) -> str | None:
        with self._lock:
            if parent in self._cache:
                return self._cache[parent]
        from agent.tracking import parent_run_url

        try:
            url = parent_run_url(tracking_uri, parent, self.ui_base, self.artifact_root)
        except Exception:  # the store is busy or gone: the rest of the page still matters
            return None
        if url is None:
            return None
        with self._lock:
            self._cache[parent] = url
        return url


def run_detail(
    summary: RunSummary, run_dir: Path, record: WorkerRecord | None, links: MlflowLinks
) -> RunDetail:
    state = read_state(run_dir)
    config = _requested(run_dir)
    parent = state.get("mlflow_parent")
    mlflow_url = None
    if parent:
        home = run_dir.parent.parent
        uri = config.get("mlflow_tracking_uri") or f"sqlite:///{(home / 'mlflow.db').resolve()}"
        mlflow_url = links.url(str(parent), str(uri))
    current = state.get("current")
    return RunDetail(
        **summary.model_dump(exclude={"links"}),
        links=run_links(run_dir.name, record, mlflow_url),
        config=config,
        stop_reason=state.get("stop_reason"),
        current=trial_view(current) if current else None,
        trial_list=[trial_view(t) for t in state.get("trials") or []],
        mlflow_parent=str(parent) if parent else None,
        mlflow_url=mlflow_url,
    )
