"""The review view a person opens on MLflow (its columns: a trial's outcome and score first) and the URLs that open
MLflow on model training, never on its GenAI pages: pure values, no client."""

from __future__ import annotations

import json

# MLflow 3.17's UI takes an experiment's kind from its workflow switch, never from this tag: the URL's
# `workflowType`, else the browser's localStorage `mlflow.workflowType_v1`, else "genai". `rlloop ui` serves MLflow
# so that a fresh browser starts on "Model training" (agent/tracking/mlflow_app.py), and every link rlloop hands out
# carries the switch too (`ML_WORKFLOW`), for an MLflow server started some other way.
ML_WORKFLOW = "workflowType=machine_learning"
# A saved view of the experiment's training runs (MLflow's shared view state, an experiment tag), with the columns a
# reviewer compares; `runs_url` opens it with the GenAI switch off, whatever a fresh browser would default to.
REVIEW_VIEW_KEY = "rlloop-review"
# Trial rows show their public-half `score` (graded trials only) and `rlloop.outcome` (graded, kept back, failed,
# rejected: the run page's words); parent rows their public baseline and best and, once ended, the private half.
OUTCOME_TAG = "rlloop.outcome"
REVIEW_COLUMNS = (
    f"tags.`{OUTCOME_TAG}`",
    "metrics.`score`",
    "metrics.`valid_score`",
    "metrics.`baseline_score`",
    "metrics.`best_score`",
    "metrics.`improvement`",
    "metrics.`submission_count`",
    "metrics.`private_best_score`",
    "metrics.`private_baseline_score`",
    "params.`recipe`",
    "tags.`rlloop.isolation`",
)

SHARED_VIEW_PREFIX = "mlflow.sharedViewState."


def review_view_tag() -> dict[str, str]:
    """The experiment tag holding the review view: MLflow's UI reads it for `?viewStateShareKey=<key>`. (It takes
    the columns and the order from it, never which runs are opened: a run's trials are one click on its row away.)"""
    state = {
        "selectedColumns": list(REVIEW_COLUMNS),
        # a trial's outcome and score first; MLflow 3.17 applies a saved order only when the view reaches its grid
        # before the grid is drawn (a race, seen both ways), else its own (params, metrics, tags, each by name)
        "columnOrder": ["attributes.`Run Name`", "attributes.`Created`", *REVIEW_COLUMNS],
        "orderByKey": "attributes.start_time",
        "orderByAsc": False,
        "runsExpanded": {},
    }
    return {f"{SHARED_VIEW_PREFIX}{REVIEW_VIEW_KEY}": json.dumps(state)}


def has_review_view(tags: dict[str, str]) -> bool:
    """Whether an experiment holds this version's review view (an older one, other columns, is rewritten)."""
    return all(tags.get(key) == value for key, value in review_view_tag().items())


def run_page_url(ui_base: str, experiment_id: str, parent: str) -> str:
    """A run's MLflow page under Model training (`Tracker.run_url`, for callers that know the experiment)."""
    return f"{ui_base.rstrip('/')}/#/experiments/{experiment_id}/runs/{parent}?{ML_WORKFLOW}"


def runs_url(run_url: str) -> str | None:
    """The training runs table of a parent run's experiment, with the review view and the GenAI switch off (a fresh
    MLflow 3 browser opens an experiment on its GenAI overview otherwise), from the parent run's page URL."""
    if "/runs/" not in run_url:
        return None
    base = run_url.split("?", 1)[0].rsplit("/runs/", 1)[0]
    return f"{base}/runs?{ML_WORKFLOW}&viewStateShareKey={REVIEW_VIEW_KEY}"


def scores_url(run_url: str) -> str | None:
    """The parent run's metric charts (MLflow's "Model metrics" tab: score, best_score, improvement, ... over
    submissions), from the parent run's page URL, with the GenAI switch off."""
    if "/runs/" not in run_url:
        return None
    return f"{run_url.split('?', 1)[0].rstrip('/')}/model-metrics?{ML_WORKFLOW}"
