"""The run page and its approval cards in real Chromium, on one real run shared by the module's tests.

The run (tiny-arith, local sandbox, 2 training steps a trial, approval `always`) is started through the service;
t01 is approved by the API, and the tests meet it waiting on t02 with a trained parent: what an approver sees, what
a viewer may not do, an edit made in the form reaching the run, and the page following the run without a reload.
Screenshots at a laptop's and a phone's width go to the module's temporary folder (and, with
RLLOOP_DOCS_SCREENSHOTS=1, to docs/figures/ for README and docs/approvals.md).
"""

from __future__ import annotations

import json
import os
import shutil
import struct
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from agent.results.rows import read_results
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
    # every line it adds is one of the proposal's own settings, at the proposal's value (the line policy continues
    # t01 at its rate: what changes is the part of the schedule, the seed, the optimizer carried)
    assert added, diff
    proposed = pending["hyperparameters"]
    for line in added:
        key, _, text = line[1:].partition(" = ")
        assert key in proposed, (key, diff)
        assert json.loads(text) == proposed[key], (line, proposed[key])
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
    overflowing = b.eval(  # at 390 px: what sticks out, innermost last, for the failure message
        "[...document.querySelectorAll('body *')].filter(e => e.getBoundingClientRect().right > 391 &&"
        " ![...e.children].some(c => c.getBoundingClientRect().right > 391))"
        ".slice(-6).map(e => e.tagName + '.' + e.className + ': ' + (e.textContent || '').slice(0, 100))"
    )
    assert _png_width(wide) == 1280 and _png_width(narrow) == 390, overflowing
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
        assert label.startswith("loss: ") and f"(steps {losses[0][0]}" in label, label
        points = b.eval(
            "document.querySelector('#trial-view svg.metric[data-metric=\"loss\"] polyline')"
            ".getAttribute('points').trim().split(' ').length"
        )
        assert points == len(losses)  # one point per logged step
    b.screenshot(shared.out / "trial-view-1280.png", 1280)
    assert b.eval("document.documentElement.scrollWidth <= window.innerWidth + 1")  # long digests wrap


def test_the_ended_run_says_what_it_achieved_in_words_on_both_halves(shared: Shared) -> None:
    """The run ended (a reviewer terminated it above): the page's headline, `rlloop runs`, summary.json and
    results.csv say the same figures, each half named; the plot's red points are labelled the private half."""
    run_dir = shared.home / "runs" / RUN
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["headline"].startswith("public half: ") and "; private half: " in summary["headline"]
    assert summary["scored_on"] == "private"  # baseline and best_score are the private half's, and say so
    (row,) = [r for r in read_results(shared.home / "results.csv") if r["run_id"] == RUN]
    grader = summary["grader"]
    assert (row["scored_on"], row["public_baseline"]) == ("private", f"{grader['baseline_score']:.4f}")
    assert row["baseline"] == f"{grader['baseline_private_score']:.4f}"
    listed = subprocess.run(
        [sys.executable, "-m", "agent.cli", "runs", "--home", str(shared.home)],
        capture_output=True,
        text=True,
        env={**os.environ, "COLUMNS": "250"},
        timeout=120,
    )
    assert f"{RUN}: {summary['headline']}" in listed.stdout, listed.stdout
    assert "public half" in listed.stdout and "private half" in listed.stdout  # the table's columns
    (run,) = [r for r in shared.client.get("/runs").json() if r["run_id"] == RUN]
    assert (
        run["headline"] == summary["headline"] and run["private_baseline"] == grader["baseline_private_score"]
    )

    shared.sign_in("val")
    b = shared.browser
    b.wait(f"document.querySelector('#headline').textContent === {json.dumps(summary['headline'])}")
    if summary.get("best_checkpoint"):
        assert summary["best_checkpoint"]["path"] in b.eval(
            "document.querySelector('#best-checkpoint').textContent"
        )
    assert b.eval("document.querySelectorAll('#score-plot .private-point').length") >= 1
    assert "private half" in b.eval("document.querySelector('#score-plot .plot-legend').textContent")
    assert "the private half, which the run never saw" in b.eval(
        "document.querySelector('#plot-note').textContent"
    )
    assert "public half" in b.eval("document.querySelector('#trials').closest('table').tHead.innerText")
    assert b.eval("document.body.innerText.toLowerCase().split('signed in as').length - 1") == 1  # once
    b.wait(
        "!['queued', 'running'].includes(document.querySelector('#run-status').textContent)", 120
    )  # worker gone
    b.screenshot(shared.out / "run-page-ended-1280.png", 1280)
    if os.environ.get("RLLOOP_DOCS_SCREENSHOTS"):
        shutil.copy(shared.out / "run-page-ended-1280.png", DOCS / "run_page_ended.png")


def test_the_page_is_legible_and_says_it_loads(shared: Shared) -> None:
    """What a person meets first: a page that says it loads before its data comes, tree labels at a readable size
    (never shrunk to fit), badges on one line at a phone's width, numbers as a person writes them, and a finished
    run without decisions saying why it has none."""
    page = httpx.get(shared.url, headers={"Accept": "text/html"})
    loading = page.text.split('id="loading"', 1)[1].split(">", 1)[0]
    assert "hidden" not in loading and "Loading the run" in page.text  # shown before any script runs
    shared.sign_in("val")
    b = shared.browser
    assert b.eval("document.querySelector('#loading').hidden") is True  # gone once the run is drawn
    b.call("Emulation.setDeviceMetricsOverride", width=1280, height=900, deviceScaleFactor=1, mobile=False)
    smallest = b.eval(
        "(() => { const s = document.querySelector('#tree-svg'), k = s.getBoundingClientRect().width"
        " / s.viewBox.baseVal.width; return Math.min(...[...s.querySelectorAll('text')]"
        ".map(t => parseFloat(getComputedStyle(t).fontSize) * k)); })()"
    )
    assert smallest >= 11, smallest  # px on screen
    for width in (1280, 390):
        b.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=900,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        wrapped = b.eval(
            "[...document.querySelectorAll('.badge')].filter(e => e.getClientRects().length > 1"
            " || e.getBoundingClientRect().height > 1.8 * parseFloat(getComputedStyle(e).fontSize))"
            ".map(e => e.textContent)"
        )
        assert wrapped == [], (width, wrapped)
    b.call("Emulation.clearDeviceMetricsOverride")
    formatted = b.eval(
        "[num(0.0007), num(0.000343), num(209), num(209.0), num(0.6333333), num(12.34567), fmt(0.58)]"
    )
    assert formatted == ["0.0007", "0.000343", "209", "209", "0.633", "12.346", "0.580"]
    never = "historyList([], {policy: 'never', ended: true}).textContent"
    assert b.eval(never) == "none: this run asks no one (approval policy never)"
    assert b.eval("historyList([], {policy: 'always', ended: true}).textContent").startswith(
        "none: no proposal"
    )


def test_the_trial_page_shows_the_end_of_its_log_wrapped(shared: Shared) -> None:
    """The log box opens on the log's end (the lines that say how the trial finished), long lines wrapped inside it;
    training figures are printed as numbers are written (steps 2, not 2.000)."""
    b = shared.browser
    if os.environ.get("RLLOOP_DOCS_SCREENSHOTS"):  # the graded trial, as the run left it
        b.call("Page.navigate", url=f"{shared.url}/trials/t02")
        b.wait("document.body.dataset.loaded === 'true' && !document.querySelector('#trial-view').hidden")
        shutil.copy(b.screenshot(shared.out / "trial-t02-1280.png", 1280), DOCS / "trial_page.png")
    log = shared.home / "runs" / RUN / "trials" / "t01" / "log.txt"
    long_line = "[trainers] " + "x" * 600
    with log.open("a") as handle:  # a long log, a very long line, and a last line to find
        handle.writelines(f"[trainers] step {i} loss 0.5\n" for i in range(1000))  # past the 16 KiB shown
        handle.write(long_line + "\n[trainers] the very last line\n")
    b.call("Page.navigate", url=f"{shared.url}/trials/t01")
    b.wait("document.body.dataset.loaded === 'true' && !document.querySelector('#trial-view').hidden")
    box = "document.querySelector('#trial-log')"
    b.wait(f"{box}.textContent.includes('the very last line')")
    assert b.eval(f"{box}.scrollHeight > {box}.clientHeight")  # it scrolls ...
    assert b.eval(
        f"{box}.scrollTop + {box}.clientHeight >= {box}.scrollHeight - 2"
    )  # ... and opens at its end
    assert b.eval(f"{box}.scrollWidth <= {box}.clientWidth + 1")  # long lines wrap, none runs off the right
    assert "earlier lines left out" in b.eval("document.querySelector('#trial-log-note').textContent")
    assert not b.eval(f"{box}.textContent").startswith("x")  # it starts at a whole line
    metrics = b.eval("document.querySelector('#trial-metrics p').textContent")
    if "steps" in metrics:
        assert ".000" not in metrics.split("steps ", 1)[1].split(" ")[0], metrics
    b.screenshot(shared.out / "trial-page-1280.png", 1280)


def test_a_fresh_service_draws_every_page_without_importing_a_trainer(shared: Shared) -> None:
    """A new service process over this home draws the real run's pages (the run page, each trial's, the lists) and
    imports none of torch, transformers, TRL or datasets to do it (the run wrote its recipes.json)."""
    assert (shared.home / "runs" / RUN / "recipes.json").is_file()
    trials = sorted(p.name for p in (shared.home / "runs" / RUN / "trials").iterdir() if p.name != "base")
    script = (
        "import json, sys\n"
        "from pathlib import Path\n"
        "from fastapi.testclient import TestClient\n"
        "from agent.service import ServiceSettings, create_app\n"
        f"app = create_app(ServiceSettings(home=Path({str(shared.home)!r})))\n"
        "client = TestClient(app)  # no lifespan: no worker supervisor in this second service\n"
        f"client.headers['Authorization'] = 'Bearer {shared.tokens['root']}'\n"
        f"urls = ['/runs', '/approvals', '/runs/{RUN}', '/runs/{RUN}/view']"
        f" + ['/runs/{RUN}/trials/' + t for t in {trials!r}]\n"
        "codes = {u: client.get(u).status_code for u in urls}\n"
        "heavy = [m for m in ('torch', 'transformers', 'trl', 'datasets') if m in sys.modules]\n"
        "print(json.dumps({'codes': codes, 'heavy': heavy}))\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    assert set(found["codes"].values()) == {200}, found["codes"]
    assert found["heavy"] == [], f"drawing the pages imported {found['heavy']}"


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
