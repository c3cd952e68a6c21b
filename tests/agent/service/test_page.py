"""The approvals page in a real headless Chromium, driven over the Chrome DevTools Protocol.

Clicks Approve, Edit & approve and Reject (with a typed reason) with real mouse events on proposals published with
agent.loop.approvals.publish_pending, and checks the decision files the waiting run would read.
`.ci/chromium.sh` installs Chromium; without it the test is skipped, except in CI (env CI set), where it fails.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from agent.core.records import Proposal, TrialRecord
from agent.loop.approvals import Decision, publish_pending, read_decision
from agent.service.auth import ADMIN_TOKEN_FILE_NAME, sign_in_url
from tests.agent.service.browser import DevTools, chromium, skip_without_chromium
from tests.agent.service.support import add_users, running_service
from trainers.catalog import CATALOG_NAME, write_catalog

skip_without_chromium()


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    with chromium(tmp_path) as found:
        yield found


def _publish(run_dir: Path, trial_id: str, index: int) -> None:
    proposal = Proposal(
        hypothesis=f"proposal {trial_id}", recipe="sft", hyperparameters={"learning_rate": 1e-3}
    )
    publish_pending(run_dir, TrialRecord(trial_id=trial_id, index=index, proposal=proposal))


def _decision(run_dir: Path, trial_id: str, timeout: float = 15) -> Decision:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        found = read_decision(run_dir, trial_id)
        if found is not None:
            return found
        time.sleep(0.1)
    raise AssertionError(f"no decision file for {trial_id}")


def test_approve_edit_and_reject_from_the_page(tmp_path: Path, browser: DevTools) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "web-run"
    for index, trial_id in enumerate(("t01", "t02", "t03"), start=1):
        _publish(run_dir, trial_id, index)
    write_catalog(run_dir / CATALOG_NAME)  # as a run does when it starts: the edit form's fields come from it
    with running_service(home, no_auth=True) as client:  # open: the reviewer types a name
        browser.call("Page.navigate", url=str(client.base_url))
        browser.wait(
            "document.body.dataset.loaded === 'true' && document.querySelectorAll('.approval').length === 3"
        )
        banner = browser.wait(
            "!document.querySelector('#open-banner').hidden && document.querySelector('#open-banner').innerText"
        )
        assert "anyone who can reach it can start runs and approve" in banner
        card = '.approval[data-run="web-run"][data-trial="{}"]'
        browser.type("#reviewer", "grace")

        browser.click(card.format("t01") + " .approve")
        approved = _decision(run_dir, "t01")
        assert approved.action == "approve" and approved.by == "grace"
        browser.wait("document.querySelector('#message').textContent.includes('t01: approve recorded')")

        browser.click(card.format("t02") + " .reject")  # no reason yet: refused on the page, nothing written
        browser.wait("document.querySelector('#message').textContent.includes('write a reason')")
        assert read_decision(run_dir, "t02") is None
        browser.type(card.format("t02") + " .reason", "learning rate too high for this model")
        browser.click(card.format("t02") + " .reject")
        rejected = _decision(run_dir, "t02")
        assert rejected.action == "reject" and rejected.reason == "learning rate too high for this model"
        assert rejected.by == "grace"
        browser.wait("document.querySelector('#message').textContent.includes('t02: reject recorded')")

        # the edit form: one field per hyperparameter from sft's schema, checked before anything is sent
        field = card.format("t03") + ' .field[data-name="{}"]'
        browser.type(field.format("learning_rate") + " input", "fast", replace=True)
        browser.click(card.format("t03") + " .edit")
        browser.wait(f"document.querySelector('{field.format('learning_rate')} .field-error').textContent")
        assert "a number is needed" in browser.eval(
            f"document.querySelector('{field.format('learning_rate')} .field-error').textContent"
        )
        time.sleep(0.5)
        assert read_decision(run_dir, "t03") is None  # refused on the page, nothing sent
        browser.type(field.format("learning_rate") + " input", "0.0002", replace=True)
        browser.click(card.format("t03") + " .edit-form details summary")  # the recipe's other fields
        browser.type(field.format("max_steps") + " input", "7", replace=True)
        browser.click(card.format("t03") + " .edit")
        browser.wait("document.querySelector('#message').textContent.includes('t03: edit recorded')")
        edited = _decision(run_dir, "t03")
        assert edited.action == "edit" and edited.set == {"learning_rate": 0.0002, "max_steps": 7}

        rows = browser.eval("document.querySelectorAll('#approvals .approval').length")
        assert rows == 3  # still pending: only the waiting run consumes a decision


def test_the_printed_sign_in_link_signs_the_browser_in(tmp_path: Path, browser: DevTools) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "web-run"
    _publish(run_dir, "t01", 1)
    with running_service(home, anonymous=True) as client:  # a fresh service: it made its admin token
        token_file = home / ADMIN_TOKEN_FILE_NAME
        browser.call("Page.navigate", url=str(client.base_url))
        browser.wait("!document.querySelector('#signin').hidden")
        # where the token is, in words: the page asks before anyone signed in, so no path of this machine
        browser.wait(
            "document.querySelector('#token-file').textContent === 'RLLOOP_HOME/service_admin_token'"
        )
        assert str(token_file) not in browser.eval("document.body.innerText")
        assert browser.eval("document.querySelectorAll('.approval').length") == 0  # refused without a token
        assert browser.eval("document.querySelector('#open-banner').hidden") is True

        link = sign_in_url(str(client.base_url), token_file.read_text().strip())
        browser.call("Page.navigate", url=link)  # as a person opens the link the service printed
        browser.wait("document.querySelector('#user').textContent === 'admin'")
        browser.wait(
            "document.body.dataset.loaded === 'true' && document.querySelectorAll('.approval').length === 1"
        )
        assert "token" not in browser.eval("location.href")  # dropped from the address bar (and history)
        assert browser.eval("sessionStorage.getItem('rlloop.token')") == token_file.read_text().strip()
        assert browser.eval("document.querySelector('#signin').hidden") is True
        browser.call("Page.reload")  # kept in the tab
        browser.wait("document.querySelector('#user').textContent === 'admin'")
        browser.click('.approval[data-run="web-run"][data-trial="t01"] .approve')
        approved = _decision(run_dir, "t01")
        assert approved.action == "approve" and approved.by == "admin"


def test_sign_in_with_a_token_and_decide_as_its_user(tmp_path: Path, browser: DevTools) -> None:
    home = tmp_path / "home"
    run_dir = home / "runs" / "web-run"
    for index, trial_id in enumerate(("t01", "t02"), start=1):
        _publish(run_dir, trial_id, index)
    tokens = add_users(home, {"grace": "approver", "val": "viewer"})
    with running_service(home) as client:
        browser.call("Page.navigate", url=str(client.base_url))
        browser.wait("!document.querySelector('#signin').hidden")
        assert (
            browser.eval("document.querySelectorAll('.approval').length") == 0
        )  # nothing shown without a token
        card = '.approval[data-run="web-run"][data-trial="{}"]'

        browser.type("#token", tokens["val"])
        browser.click("#signin-button")
        browser.wait(
            "document.body.dataset.loaded === 'true' && document.querySelectorAll('.approval').length === 2"
        )
        assert browser.eval("document.querySelector('#user').textContent") == "val"
        # a viewer may look, not decide: the page offers no working button, and the service refuses the POST
        assert browser.eval(f"document.querySelector('{card.format('t01')} .approve').disabled") is True
        assert "an approver decides" in browser.eval(
            f"document.querySelector('{card.format('t01')}').innerText"
        )
        refused = browser.eval(
            "api('POST', '/approvals/web-run/t01', {action: 'approve'}).then(() => 'accepted', e => e.message)"
        )
        assert "needs a bearer token of role" in refused
        assert read_decision(run_dir, "t01") is None

        browser.click("#signout")
        browser.wait("!document.querySelector('#signin').hidden")
        browser.type("#token", tokens["grace"])
        browser.click("#signin-button")
        browser.wait("document.querySelector('#user').textContent === 'grace'")
        assert browser.eval("document.querySelector('#reviewer-line').hidden") is True  # the token says who
        browser.wait("document.querySelectorAll('.approval').length === 2")
        browser.click(card.format("t01") + " .approve")
        approved = _decision(run_dir, "t01")
        assert approved.action == "approve" and approved.by == "grace"
        browser.wait("document.querySelector('#message').textContent.includes('t01: approve recorded')")
        # the token is kept in this tab's sessionStorage and sent as a header, never as a cookie
        assert browser.eval("document.cookie") == ""
        assert browser.eval("sessionStorage.getItem('rlloop.token')") == tokens["grace"]


def test_the_page_says_when_the_service_stops_answering(tmp_path: Path, browser: DevTools) -> None:
    home = tmp_path / "home"
    _publish(home / "runs" / "web-run", "t01", 1)
    with running_service(home, no_auth=True) as client:
        browser.call("Page.navigate", url=str(client.base_url))
        browser.wait("document.body.dataset.loaded === 'true'")
        assert browser.eval("document.querySelector('#offline').hidden") is True
    # the service is gone: the next poll says so, and the card stays for when it is back
    banner = browser.wait(
        "!document.querySelector('#offline').hidden && document.querySelector('#offline').textContent",
        timeout=20,
    )
    assert "The service is unreachable" in banner
    assert browser.eval("document.querySelectorAll('.approval').length") == 1


def test_what_a_run_wrote_is_shown_as_text_never_as_html(tmp_path: Path, browser: DevTools) -> None:
    home = tmp_path / "home"
    hostile = '<img src=x onerror="window.pwned = 1"><b>bold</b>'
    proposal = Proposal(
        hypothesis=hostile,
        rationale=hostile,
        recipe="sft",
        hyperparameters={"learning_rate": 1e-3, "<i>name</i>": hostile},
    )
    publish_pending(home / "runs" / "web-run", TrialRecord(trial_id="t01", index=1, proposal=proposal))
    (home / "runs" / "web-run" / "run.json").write_text(
        json.dumps({"benchmark": "arith", "approval": "always"})
    )
    with running_service(home, no_auth=True) as client:
        for url in (str(client.base_url), f"{client.base_url}/runs/web-run"):
            browser.call("Page.navigate", url=url)
            browser.wait(
                "document.body.dataset.loaded === 'true' && document.querySelector('.approval') !== null"
            )
            card = browser.eval("document.querySelector('.approval').innerText")
            assert hostile in card  # the literal text, as written
            assert (
                browser.eval("document.querySelectorAll('.approval img, .approval b, .approval i').length")
                == 0
            )
            assert browser.eval("window.pwned === undefined") is True
