"""The run page and its approval cards in real Chromium, on one real run shared by the module's tests.

The run (tiny-arith, local sandbox, 2 training steps a trial, approval `always`) is started through the service;
t01 is approved by the API, and the tests meet it waiting on t02 with a trained parent: what an approver sees, what
a viewer may not do, an edit made in the form reaching the run, and the page following the run without a reload.
Screenshots at a laptop's and a phone's width go to the module's temporary folder (and, with
RLLOOP_DOCS_SCREENSHOTS=1, to docs/figures/ for README).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.agent.service.browser import DevTools, chromium, skip_without_chromium
from tests.agent.service.support import (
    add_users,
    free_port,
    kill_workers,
    running_mlflow_ui,
    running_service,
    wait_for,
)

skip_without_chromium()
pytestmark = pytest.mark.slow

RUN = "rp-1"
DOCS = Path(__file__).resolve().parents[3] / "docs" / "figures"
REQUEST = {
    "run_id": RUN,
    "loop_n": 3,
    "approval": "always",
    "timeout": "20m",
    "sandbox": "local",
    "eval_limit": 40,
    "valid_limit": 40,
    "trial_steps": 2,
    "quiet": True,
}


class Shared:
    """The module's one service, run, users and browser."""

    def __init__(
        self, home: Path, client: httpx.Client, tokens: dict[str, str], browser: DevTools, out: Path
    ):
        self.home = home
        self.client = client
        self.tokens = tokens
        self.browser = browser
        self.out = out

    @property
    def url(self) -> str:
        return f"{self.client.base_url}/runs/{RUN}"

    def sign_in(self, user: str) -> None:
        """Open the run page as a person would and sign in with the user's token (typed into the form)."""
        b = self.browser
        b.call("Page.navigate", url=self.url)
        # the page asks /auth/me after it loads: wait until it shows either the form or who is signed in
        b.wait(
            "document.readyState === 'complete' && (!document.querySelector('#signin').hidden"
            " || !document.querySelector('#whoami').hidden)"
        )
        if not b.eval("document.querySelector('#whoami').hidden"):
            b.click("#signout")
        b.wait("!document.querySelector('#signin').hidden")
        b.type("#token", self.tokens[user])
        b.click("#signin-button")
        b.wait(f"document.querySelector('#user').textContent === {json.dumps(user)}")
        b.wait(
            "document.body.dataset.loaded === 'true' && document.querySelectorAll('#tree g.node').length > 0"
        )


def _waiting_on(trial_id: str) -> Any:
    return lambda body: body["status"] == "waiting for approval" and body["pending_approvals"] == [trial_id]


@pytest.fixture(scope="module")
def shared(tmp_path_factory: pytest.TempPathFactory, tiny_model_dir: Path) -> Iterator[Shared]:
    root = tmp_path_factory.mktemp("run-page")
    home = root / "home"
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    tokens = add_users(home, {"ada": "approver", "val": "viewer", "root": "admin"})
    mlflow_ui = f"http://127.0.0.1:{free_port()}"
    try:
        with running_service(
            home, token=tokens["root"], max_concurrent_runs=1, mlflow_ui_url=mlflow_ui
        ) as client:
            created = client.post("/runs", json=REQUEST)
            assert created.status_code == 202, created.text
            wait_for(client, RUN, _waiting_on("t01"), timeout=600)
            assert client.post(f"/approvals/{RUN}/t01", json={"action": "approve"}).status_code == 200
            wait_for(client, RUN, _waiting_on("t02"), timeout=600)
            with chromium(root) as browser:
                yield Shared(home, client, tokens, browser, root)
    finally:
        kill_workers(home)


def _png_width(path: Path) -> int:
    data = path.read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n"
    return int(struct.unpack(">I", data[16:20])[0])


def _score_text(scored: dict[str, Any]) -> str:
    return f"{scored['score']:.3f} [{scored['ci_low']:.3f}, {scored['ci_high']:.3f}] n={scored['n']}"


def _expected_state(trial: dict[str, Any]) -> str:
    if trial["status"] == "succeeded":
        return "graded" if trial["submission_id"] is not None else "kept back"
    return {"failed": "failed", "rejected": "rejected"}.get(trial["status"], trial["status"])


def test_anonymous_requests_are_refused_and_the_page_holds_no_data(shared: Shared) -> None:
    with httpx.Client(base_url=str(shared.client.base_url), timeout=30) as anonymous:
        for path in (f"/runs/{RUN}", f"/runs/{RUN}/view", f"/runs/{RUN}/trials/t01", "/approvals"):
            refused = anonymous.get(path)
            assert refused.status_code == 401, (path, refused.text)
        page = anonymous.get(f"/runs/{RUN}", headers={"Accept": "text/html"})
        assert page.status_code == 200 and 'id="run-view"' in page.text
        assert "t01" not in page.text and "tiny-arith" not in page.text  # the data comes only with a token
    b = shared.browser
    b.call("Page.navigate", url=shared.url)
    b.wait("!document.querySelector('#signin').hidden")
    assert b.eval("document.querySelector('#run-view').hidden") is True
    assert b.eval("document.querySelectorAll('#tree g.node').length") == 0


def test_a_viewer_sees_the_run_but_cannot_decide(shared: Shared) -> None:
    shared.sign_in("val")
    b = shared.browser
    card = f'.approval[data-run="{RUN}"][data-trial="t02"]'
    b.wait(f"document.querySelector('{card} .approve') !== null")
    assert b.eval(f"[...document.querySelectorAll('{card} .actions button')].every(x => x.disabled)") is True
    assert "an approver decides" in b.eval(f"document.querySelector('{card}').innerText")
    refused = b.eval(
        f"api('POST', '/approvals/{RUN}/t02', {{action: 'approve'}}).then(() => 'accepted', e => e.message)"
    )
    assert "needs a bearer token of role approver or admin" in refused
    assert not (shared.home / "runs" / RUN / "approvals" / "t02.decision.json").exists()
    # every page that shows the run says it waits: here, a trial's own view
    b.call("Page.navigate", url=f"{shared.url}/trials/t01")
    b.wait("document.body.dataset.loaded === 'true' && !document.querySelector('#trial-view').hidden")
    assert "This run waits for a person: t02" in b.eval("document.querySelector('#trial-waiting').innerText")


def test_the_approval_card_and_the_tree_show_what_an_approver_needs(shared: Shared) -> None:
    client, b = shared.client, shared.browser
    detail = client.get(f"/runs/{RUN}").json()
    (pending,) = client.get("/approvals").json()
    context = pending["context"]
    shared.sign_in("ada")
    card = f'.approval[data-run="{RUN}"][data-trial="t02"]'
    b.wait(f"document.querySelector('{card} .parent-scores') !== null")

    # the parent's scores, as the run recorded them (a trial: its own record; the base model: the run's baseline)
    parent_id = pending["init_from"] or "base"
    parent_text = b.eval(f"document.querySelector('{card} .parent-scores').innerText")
    valid = context["parent"]["valid"]
    if parent_id == "base":
        assert parent_text.startswith("base model")
    else:
        (parent,) = [t for t in detail["trial_list"] if t["trial_id"] == parent_id]
        assert parent_text.startswith(f"{parent_id} ({_expected_state(parent)})")
        assert valid["score"] == parent["valid_score"]
    if valid["score"] is not None:
        assert _score_text(valid) in parent_text
    # the diff of what it changes, and what it will cost
    diff = b.eval(f"document.querySelector('{card} .config-diff').innerText")
    added = [line for line in diff.splitlines() if line.startswith("+") and not line.startswith("+++")]
    assert any(line.startswith("+learning_rate = ") for line in added), diff
    assert f"{pending['hyperparameters']['learning_rate']}" in diff or "learning_rate" in diff
    cost = b.eval(f"document.querySelector('{card} .cost').innerText")
    assert f"{round(context['estimated_compute_s'])} s of training compute" in cost
    assert "always" in b.eval(f"document.querySelector('{card} .asked').innerText")
    assert b.eval(f"document.querySelector('{card} .field[data-name=\"learning_rate\"] input') !== null")

    # the tree: one node per trial plus the base model and the proposal that waits, each in its state
    states = b.eval(
        "Object.fromEntries([...document.querySelectorAll('#tree g.node')].map(g => [g.dataset.id, g.dataset.state]))"
    )
    expected = {"base": "base", "t02": "pending"} | {
        t["trial_id"]: _expected_state(t) for t in detail["trial_list"]
    }
    assert states == expected
    plotted = b.eval("document.querySelector('#score-plot').dataset.submissions")
    assert int(plotted) == detail["submissions"]
    budget_cells = json.dumps('#budget [data-budget="trial compute"] td')
    cells = b.eval(f"[...document.querySelectorAll({budget_cells})].map(td => td.textContent)")
    assert cells[0] == "trial compute" and float(cells[1].split()[0]) > 0  # t01 trained
    assert "waits for a person: t02" in b.eval("document.querySelector('#waiting').innerText")

    wide = b.screenshot(shared.out / "run-page-1280.png", 1280)
    narrow = b.screenshot(shared.out / "run-page-390.png", 390)
    assert _png_width(wide) == 1280 and _png_width(narrow) == 390
    assert b.eval(
        "document.documentElement.scrollWidth <= window.innerWidth + 1"
    )  # no sideways scroll at 1280
    if os.environ.get("RLLOOP_DOCS_SCREENSHOTS"):
        DOCS.mkdir(parents=True, exist_ok=True)
        shutil.copy(wide, DOCS / "run_page.png")
        b.screenshot_element(card, DOCS / "approval_card.png", 900)


def test_an_edit_in_the_form_reaches_the_run_and_the_page_follows_it(shared: Shared) -> None:
    client, b = shared.client, shared.browser
    shared.sign_in("ada")
    b.eval("window.sameDocument = 'yes'")  # gone if the page reloads
    card = f'.approval[data-run="{RUN}"][data-trial="t02"]'
    field = f'{card} .field[data-name="learning_rate"]'
    b.type(f"{field} input", "0.00123", replace=True)
    b.click(f"{card} .edit")
    b.wait(f"document.querySelector('#message').textContent.includes('{RUN} t02: edit recorded')")

    def edited(body: dict[str, Any]) -> bool:
        trials = [*body["trial_list"], *([body["current"]] if body["current"] else [])]
        return any(t["trial_id"] == "t02" and t["approval"] for t in trials)

    body = wait_for(client, RUN, edited, timeout=300)
    trials = [*body["trial_list"], *([body["current"]] if body["current"] else [])]
    (t02,) = [t for t in trials if t["trial_id"] == "t02"]
    assert t02["hyperparameters"]["learning_rate"] == 0.00123  # what trains is what the reviewer set
    assert t02["approval"]["action"] == "edit" and t02["approval"]["by"] == "ada"
    assert t02["approval"]["set"] == {"learning_rate": 0.00123}

    # the page moves on by itself: t02 leaves "pending", then t03 waits and its card appears
    b.wait(
        "document.querySelector('#tree g.node[data-id=\"t02\"]')?.dataset.state !== 'pending'", timeout=300
    )
    b.wait(f'document.querySelector(\'.approval[data-run="{RUN}"][data-trial="t03"]\') !== null', timeout=600)
    assert "t02: edit by ada" in b.eval("document.querySelector('#history').innerText")
    b.click(f'.approval[data-run="{RUN}"][data-trial="t03"] .terminate')
    b.wait(
        "document.querySelector('#stop-reason')?.innerText.includes('terminated by a reviewer')", timeout=300
    )
    b.wait(
        "document.querySelector('#tree g.node[data-id=\"t03\"]')?.dataset.state === 'rejected'", timeout=60
    )
    assert b.eval("window.sameDocument") == "yes"
    assert b.eval("document.querySelector('#waiting').hidden") is True


def test_the_trial_view_shows_its_proposal_log_and_curves(shared: Shared) -> None:
    b = shared.browser
    b.call("Page.navigate", url=f"{shared.url}/trials/t02")
    b.wait("document.body.dataset.loaded === 'true' && !document.querySelector('#trial-view').hidden")
    changes = b.eval("document.querySelector('#trial-changes tr[data-name=\"learning_rate\"]').innerText")
    assert "0.00123" in changes
    log = (shared.home / "runs" / RUN / "trials" / "t02" / "log.txt").read_text().strip().splitlines()[-1]
    assert log.strip() in b.eval("document.querySelector('#trial-log').textContent")
    assert b.eval("document.querySelector('#trial-state').textContent") in ("graded", "kept back", "failed")
    assert "decided: edit by ada" in b.eval("document.querySelector('#trial-facts').innerText")
    history = shared.home / "runs" / RUN / "trials" / "t02" / "output" / "log_history.jsonl"
    if (
        b.eval("document.querySelector('#trial-state').textContent") != "failed"
    ):  # its curves, from its own log
        rows = [json.loads(line) for line in history.read_text().splitlines() if line.strip()]
        losses = [(row["step"], row["loss"]) for row in rows if isinstance(row.get("loss"), int | float)]
        assert losses, rows
        drawn = b.eval("[...document.querySelectorAll('#trial-view svg.metric')].map(s => s.dataset.metric)")
        assert "loss" in drawn, drawn
        label = b.eval(
            "document.querySelector('#trial-view svg.metric[data-metric=\"loss\"] .plot-label').textContent"
        )
        assert label.startswith("loss: ") and f"(step {losses[0][0]}" in label, label
        points = b.eval(
            "document.querySelector('#trial-view svg.metric[data-metric=\"loss\"] polyline')"
            ".getAttribute('points').trim().split(' ').length"
        )
        assert points == len(losses)  # one point per logged step
    b.screenshot(shared.out / "trial-view-1280.png", 1280)
    assert b.eval("document.documentElement.scrollWidth <= window.innerWidth + 1")  # long digests wrap


def test_the_mlflow_link_opens_the_training_runs_for_a_fresh_browser(shared: Shared) -> None:
    """`rlloop ui` as a reviewer opens it from the run page: a fresh profile, the training runs table in the review
    view (not MLflow 3's GenAI overview), with the run and the columns a reviewer compares."""
    view = shared.client.get(f"/runs/{RUN}/view").json()
    url = view["mlflow_runs_url"]
    assert url and "workflowType=machine_learning" in url and "viewStateShareKey=rlloop-review" in url
    # the parent's score plot, one click from the run page (test_mlflow_landing.py opens it in a fresh browser)
    scores = view["mlflow_scores_url"]
    assert scores == view["mlflow_url"].replace("?", "/model-metrics?")
    shared.sign_in("val")
    assert shared.browser.eval("document.querySelector('#mlflow-scores').getAttribute('href')") == scores
    assert shared.browser.eval("document.querySelector('#mlflow-runs').getAttribute('href')") == url
    port = int(url.split("://", 1)[1].split("/", 1)[0].rsplit(":", 1)[1])
    with running_mlflow_ui(shared.home, port):
        fresh = shared.out / "fresh-reviewer"
        fresh.mkdir(exist_ok=True)
        with chromium(fresh) as b:
            # wide enough that the grid renders every column of the view (it draws only what is on screen)
            b.call(
                "Emulation.setDeviceMetricsOverride",
                width=2400,
                height=1000,
                deviceScaleFactor=1,
                mobile=False,
            )
            b.call("Page.navigate", url=url)
            b.wait(
                f"document.body.innerText.includes('baseline_score') && document.body.innerText.includes('{RUN}')",
                timeout=90,
            )
            text = b.eval("document.body.innerText")
            # the review view's columns that this run logged (no submission yet: no best_score or improvement)
            assert "valid_score" in text and "Model training" in text
            assert "You're viewing a shared view" in text  # the view the run saved, not a fresh default
            assert "/runs" in b.eval("location.hash") and "overview" not in b.eval("location.hash")
            assert "workflowType=machine_learning" in b.eval("location.hash")
            assert "Tool calls" not in text and "Token Usage" not in text  # not the GenAI overview
            b.screenshot(shared.out / "mlflow-runs.png", 1400)
