"""Where MLflow opens for a reviewer: the links rlloop hands out, in real Chromium with a fresh profile each, on a real
MLflow UI (`rlloop ui`'s command) over a real store written the way a run writes it (parent, traced node, trials,
scores over submissions).

MLflow 3.17 takes an experiment's kind from its GenAI / Model training switch (the URL's `workflowType`, else the
browser's localStorage, else "genai"), not from the `mlflow.experimentKind` tag, so plain MLflow opens a fresh browser
on the GenAI overview; `rlloop ui` serves it so that a fresh browser starts on Model training (agent.tracking.mlflow_app),
and every link rlloop prints or serves carries the switch as well.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from agent.core.records import Proposal, TrialRecord
from agent.tracking.links import review_links
from agent.tracking.review import runs_url, scores_url
from agent.tracking.tracker import EXPERIMENT_KIND_TAG, Tracker
from tests.agent.service.browser import DevTools, chromium, skip_without_chromium
from tests.agent.service.support import free_port, running_mlflow_ui

skip_without_chromium()
pytestmark = pytest.mark.slow

RUN = "landing-1"
SWITCH = "mlflow.workflowType_v1"
EXPANDER = "button[data-component-id*='runnamecellrenderer']"  # the ⊞ before a parent run's name  # where MLflow 3.17 keeps a browser's GenAI / Model training switch
# the sort headers MLflow's runs table draws for the review view's columns (what a reviewer compares)
COLUMNS = (
    "rlloop.outcome",
    "score",
    "valid_score",
    "baseline_score",
    "best_score",
    "improvement",
    "submission_count",
    "private_best_score",
    "recipe",
    "rlloop.isolation",
)


@dataclass
class Store:
    home: Path
    ui: str
    experiment_id: str
    run_url: str  # the parent run's page, as the service's API gives it (`Tracker.run_url`)
    printed: str  # the link `rlloop ui` prints for the experiment


def _write_run(home: Path) -> tuple[str, str]:
    """What a run writes: its parent (params, a traced node, the baseline), three trials and their submissions' scores,
    the final tags. Returns (experiment id, parent run id)."""
    tracker = Tracker(f"sqlite:///{home / 'mlflow.db'}", home / "mlartifacts")
    parent = tracker.start_parent(RUN, "arith", {"isolation": "process", "loop_n": 3}, environment={})
    with tracker.node_trace("prepare", run_id=RUN, benchmark="arith", trial_id=None, inputs={}) as span:
        pass
    assert span is not None  # the experiment holds traces: what makes MLflow 3 lean to its GenAI pages
    tracker.link(span.trace_id, parent)
    tracker.log_metrics(parent, {"baseline_score": 0.25}, step=0)
    best = 0.25
    for step, score in enumerate((0.3, 0.5, 0.4), start=1):
        trial = TrialRecord(
            trial_id=f"t{step:02d}",
            index=step,
            proposal=Proposal(hypothesis="more steps", recipe="sft"),
            status="succeeded",
            score=score,
            submission_id=step,
            valid_score=score - 0.01,
            duration_s=2.0,
        )
        tracker.log_trial(parent, RUN, "arith", trial, [])
        best = max(best, score)
        scores = {"score": score, "best_score": best, "submission_count": step, "improvement": best - 0.25}
        tracker.log_metrics(parent, scores, step=step)
        tracker.log_metrics(parent, {"valid_score": score - 0.01}, step=step)
    kept = TrialRecord(  # trained, not better beyond noise: not sent to the grader
        trial_id="t04",
        index=4,
        proposal=Proposal(hypothesis="a copy of t02", recipe="sft"),
        status="succeeded",
        valid_score=2 / 3,  # 0.6666666666666666 in the store unless rounded
        duration_s=2.0,
    )
    tracker.log_trial(parent, RUN, "arith", kept, [])
    tracker.log_metrics(parent, {"private_best_score": 0.48, "private_baseline_score": 0.22}, step=3)
    tracker.set_tags(parent, {"rlloop.isolation": "process", "rlloop.status": "finished"})
    tracker.finish(parent, True)
    experiment_id = tracker.experiment_id("arith")
    kind = tracker.client.get_experiment(experiment_id).tags[EXPERIMENT_KIND_TAG]
    assert kind == "custom_model_development"
    return experiment_id, parent


@pytest.fixture(scope="module")
def store(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Store]:
    home = tmp_path_factory.mktemp("mlflow-landing")
    experiment_id, parent = _write_run(home)
    port = free_port()
    ui = f"http://127.0.0.1:{port}"
    [(name, printed)] = review_links(home, ui)
    assert name == "rlloop/arith"
    with running_mlflow_ui(home, port):
        run_url = Tracker(f"sqlite:///{home / 'mlflow.db'}", home / "mlartifacts").run_url(parent, ui)
        assert run_url == f"{ui}/#/experiments/{experiment_id}/runs/{parent}?workflowType=machine_learning"
        yield Store(home, ui, experiment_id, run_url, printed)


def _fresh(b: DevTools, url: str) -> None:
    """Open `url` in the fresh profile, wide enough that the grid draws every column (it draws what is on screen)."""
    b.call("Emulation.setDeviceMetricsOverride", width=2400, height=1000, deviceScaleFactor=1, mobile=False)
    b.call("Page.navigate", url=url)


def _switch_untouched(b: DevTools) -> bool:
    """The browser's GenAI / Model training switch is a fresh user's: unset, or rlloop ui's default."""
    return bool(b.eval(f"[null, '\"machine_learning\"'].includes(localStorage.getItem({SWITCH!r}))"))


def _headers(b: DevTools) -> list[str]:
    return list(
        b.eval(
            "[...document.querySelectorAll('[data-testid^=\"sort-header-\"]')]"
            ".map(e => e.dataset.testid.slice('sort-header-'.length))"
        )
    )


def test_a_fresh_browser_opens_the_experiment_on_its_training_runs_and_a_reviewers_choice_is_kept(
    store: Store, tmp_path: Path
) -> None:
    """Plain MLflow 3.17 sends a fresh browser from the experiments list (or a bare `#/experiments/<id>`) to the GenAI
    overview, whatever the experiment's kind tag says; `rlloop ui` (agent.tracking.mlflow_app) starts it on the training
    runs instead. It is only a default: a reviewer who turns the GenAI switch on gets the GenAI pages."""
    with chromium(tmp_path) as b:
        _fresh(b, f"{store.ui}/#/experiments")
        link = f"a[href*='/experiments/{store.experiment_id}']"
        b.wait(f"document.querySelector({link!r}) !== null", 90)
        b.click(link)  # the experiment's name in MLflow's own list
        b.wait(f"location.hash.includes('/runs') && document.body.innerText.includes({RUN!r})", 90)
        hash_ = b.eval("location.hash")
        assert "overview" not in hash_ and "genai" not in hash_, hash_
        assert b.eval(f"localStorage.getItem({SWITCH!r})") == '"machine_learning"'
        assert "Tool calls" not in b.eval("document.body.innerText")
        # the switch as the sidebar stores it, then a new document on the bare link: in one step, so that the open
        # page cannot route first (it rewrites a bare link with its own workflowType, which a reload would keep)
        b.eval(
            f"localStorage.setItem({SWITCH!r}, JSON.stringify('genai'));"
            f" location.replace({store.ui + '/?again=1#/experiments/' + store.experiment_id!r})"
        )
        b.wait("location.hash.includes('/overview')", timeout=90)
        assert "workflowType=genai" in b.eval("location.hash")


def test_the_links_rlloop_hands_out_land_on_the_training_runs_with_the_reviewers_columns(
    store: Store, tmp_path: Path
) -> None:
    """`rlloop ui`'s printed link and the run page's "its trials compared" (`runs_url` of the API's run link) are one
    URL: the training runs table in the review view, every reviewer's column drawn, not the GenAI overview."""
    assert runs_url(store.run_url) == store.printed
    with chromium(tmp_path) as b:
        _fresh(b, store.printed)
        b.wait(
            f"document.body.innerText.includes({RUN!r}) && document.body.innerText.includes('rlloop.isolation')",
            90,
        )
        hash_ = b.eval("location.hash")
        assert f"/experiments/{store.experiment_id}/runs?" in hash_ and "overview" not in hash_
        assert "workflowType=machine_learning" in hash_ and _switch_untouched(b)
        assert set(COLUMNS) <= set(_headers(b)), _headers(b)
        text = b.eval("document.body.innerText")
        assert "You're viewing a shared view" in text  # the view the run saved, not a fresh default
        assert "Tool calls" not in text and "Token Usage" not in text  # not the GenAI overview
        assert b.eval("document.querySelector('input[name=runs-view-mode][value=TABLE]').checked")
        b.screenshot(tmp_path / "mlflow-runs.png", 1400)


def test_the_bare_address_lands_on_the_training_runs_with_each_trials_score_and_outcome(
    store: Store, tmp_path: Path
) -> None:
    """`rlloop ui`'s own address, typed or bookmarked, opens the newest rlloop experiment's training runs in the review
    view (not MLflow's welcome page); each trial row carries its public score and whether it was graded or kept back,
    its valid score rounded as results.csv writes it. An address with a route (MLflow's experiments list) stays."""
    (tmp_path / "root").mkdir()
    (tmp_path / "routed").mkdir()
    with chromium(tmp_path / "root") as b:
        _fresh(b, store.ui)
        b.wait(f"document.body.innerText.includes({RUN!r})", 90)
        hash_ = b.eval("location.hash")
        assert (
            f"/experiments/{store.experiment_id}/runs?" in hash_
            and "viewStateShareKey=rlloop-review" in hash_
        )
        assert set(COLUMNS) <= set(_headers(b)), _headers(b)
        b.click(EXPANDER)  # MLflow shows a run's nested trial runs once its row is opened
        b.wait("document.body.innerText.includes('kept back')", 60)
        rows = b.eval(
            "[...document.querySelectorAll('.ag-center-cols-container .ag-row, .ag-pinned-left-cols-container .ag-row')]"
            ".map(r => r.innerText.replace(/\\s+/g, ' '))"
        )
        text = b.eval("document.body.innerText")
        assert "graded" in text and "kept back" in text, rows
        assert "0.6667" in text and "0.66666" not in text  # valid_score as results.csv writes it
        b.screenshot(tmp_path / "mlflow-root.png", 1400)
    with chromium(tmp_path / "routed") as b:
        _fresh(b, f"{store.ui}/#/experiments")
        b.wait(f"document.querySelector(\"a[href*='/experiments/{store.experiment_id}']\") !== null", 90)
        assert "/runs" not in b.eval("location.hash")


def test_the_score_plot_is_one_click_from_the_landing_and_one_link_from_the_run_page(
    store: Store, tmp_path: Path
) -> None:
    """From the training runs table, one click ("Chart") draws the parent's score over submissions; the run page's
    "its score plot" (`scores_url`) opens the parent run's Model metrics tab on the same chart."""
    (tmp_path / "landing").mkdir()
    (tmp_path / "direct").mkdir()
    with chromium(tmp_path / "landing") as b:
        _fresh(b, store.printed)
        b.wait(f"document.body.innerText.includes({RUN!r})", timeout=90)
        b.click("input[name=runs-view-mode][value=CHART]")
        b.wait(f"document.body.innerText.includes('{RUN} (score)')", timeout=60)  # the line chart's legend
        assert "compareRunsMode=CHART" in b.eval("location.hash")
        # a line over steps (submissions), not a bar; its axis is drawn after the legend (a read at once missed it
        # on a loaded machine)
        b.wait("document.body.innerText.includes('Step')", timeout=60)
    link = scores_url(store.run_url)
    assert link == store.run_url.replace("?", "/model-metrics?")
    with chromium(tmp_path / "direct") as b:
        _fresh(b, link)
        # every chart's legend at once: MLflow re-renders the tab while its charts load, so a text read just after
        # the first legend appeared could catch the page between two renders (seen once on a loaded machine)
        charts = ("score", "best_score", "improvement", "valid_score")
        b.wait(" && ".join(f"document.body.innerText.includes('{RUN} ({m})')" for m in charts), timeout=90)
        assert b.eval("location.hash").split("?")[0].endswith("/model-metrics")  # the run's Model metrics tab
        b.screenshot(tmp_path / "mlflow-scores.png", 1400)


def test_the_run_link_opens_the_parent_under_model_training_one_click_from_its_scores(
    store: Store, tmp_path: Path
) -> None:
    """The run page's "this run" (the API's `mlflow_url`): the parent run with the switch on Model training, so its
    experiment link leads to the training runs (a fresh browser's GenAI pages would send it to "Evaluation runs"),
    and its `score` metric one click from the chart."""
    with chromium(tmp_path) as b:
        _fresh(b, store.run_url)
        b.wait(
            "document.body.innerText.includes('Model metrics') && document.body.innerText.includes('t01')", 90
        )
        links = b.eval("[...document.querySelectorAll('a')].map(a => a.getAttribute('href') || '')")
        runs = f"#/experiments/{store.experiment_id}/runs?workflowType=machine_learning"
        assert runs in links and not any("evaluation-runs" in link for link in links), links
        b.click("a[href$='/model-metrics']")  # the first metric's name in the run's Metrics table
        b.wait(f"document.body.innerText.includes('{RUN} (score)')", timeout=60)
        assert b.eval("location.hash").split("?")[0].endswith("/model-metrics") and _switch_untouched(b)
