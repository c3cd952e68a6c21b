"""The MLflow links a person is handed, read from a store: a run's page (fast, for the service's pages) and the
review view of every rlloop experiment in a home (for `rlloop ui`)."""

from __future__ import annotations

import logging
import sqlite3
from pathlib import Path

from agent.tracking.review import ML_WORKFLOW, REVIEW_VIEW_KEY, has_review_view, run_page_url
from agent.tracking.tracker import Tracker, sqlite_path

log = logging.getLogger(__name__)


def review_links(root: Path, ui_base: str) -> list[tuple[str, str]]:
    """(experiment, link to its training runs in the review view) for every rlloop experiment of a home's store,
    saving the view on experiments made before it (or its columns) existed; empty when the store cannot be read."""
    db = root / "mlflow.db"
    if not db.is_file():
        return []
    try:
        tracker = Tracker(f"sqlite:///{db}", root / "mlartifacts")
        found = tracker.client.search_experiments(filter_string="name LIKE 'rlloop/%'")
        links = []
        for experiment in found:
            if not has_review_view(experiment.tags):
                tracker.save_review_view(str(experiment.experiment_id))
            base = f"{ui_base}/#/experiments/{experiment.experiment_id}"
            links.append(
                (
                    experiment.name,
                    f"{base}/runs?{ML_WORKFLOW}&viewStateShareKey={REVIEW_VIEW_KEY}",
                )
            )
        return links
    except Exception as exc:  # a busy or newer store: the UI still starts
        log.warning("could not list the experiments of %s: %s", db, exc)
        return []


def parent_run_url(tracking_uri: str, parent: str, ui_base: str, artifact_root: Path) -> str | None:
    """The parent run's MLflow page (`Tracker.run_url`) for a page that must answer fast: a SQLite store is read
    directly (one indexed row, read-only; importing MLflow to ask it would take seconds). None while the run is
    not in the store. Raises what the store raises."""
    database = sqlite_path(tracking_uri)
    if database is None:
        return Tracker(tracking_uri, artifact_root).run_url(parent, ui_base)
    experiment = _experiment_of(database, parent)
    return None if experiment is None else run_page_url(ui_base, experiment, parent)


def _experiment_of(database: Path, run_uuid: str) -> str | None:
    """The experiment id of an MLflow run in a SQLite store, read-only; None when it is not there (yet)."""
    if not database.is_file():
        return None
    conn = sqlite3.connect(f"file:{database}?mode=ro", uri=True, timeout=2.0)
    try:
        row = conn.execute("SELECT experiment_id FROM runs WHERE run_uuid = ?", (run_uuid,)).fetchone()
    except sqlite3.Error:
        return None
    finally:
        conn.close()
    return str(row[0]) if row else None
