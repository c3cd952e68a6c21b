"""The approvals page in a real headless Chromium, driven over the Chrome DevTools Protocol.

Clicks Approve, Edit & approve and Reject (with a typed reason) with real mouse events on proposals published with
agent.loop.approvals.publish_pending, and checks the decision files the waiting run would read.
`.ci/chromium.sh` installs Chromium; without it the test is skipped, except in CI (env CI set), where it fails.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

from agent.loop.approvals import Decision, publish_pending, read_decision
from agent.proposers.base import Proposal, TrialRecord
from agent.service.auth import ADMIN_TOKEN_FILE_NAME, sign_in_url
from tests.agent.service.support import add_users, running_service

CHROMIUM = next(
    (found for name in ("chromium", "chromium-browser", "google-chrome") if (found := shutil.which(name))),
    None,
)
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--remote-debugging-port=0",
    "--remote-allow-origins=*",
]

if CHROMIUM is None and not os.environ.get("CI"):
    pytest.skip("chromium is not installed (run .ci/chromium.sh); CI is unset", allow_module_level=True)


class DevTools:
    """The few CDP commands the test needs: navigate, evaluate, click with the mouse, type."""

    def __init__(self, socket: ClientConnection) -> None:
        self.socket = socket
        self.last_id = 0

    def call(self, method: str, **params: Any) -> dict[str, Any]:
        self.last_id += 1
        self.socket.send(json.dumps({"id": self.last_id, "method": method, "params": params}))
        while True:
            message = json.loads(self.socket.recv(timeout=30))
            if message.get("id") == self.last_id:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                return dict(message.get("result", {}))

    def eval(self, expression: str) -> Any:
        result = self.call("Runtime.evaluate", expression=expression, returnByValue=True, awaitPromise=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    def wait(self, expression: str, timeout: float = 30) -> Any:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            try:
                value = self.eval(expression)
            except RuntimeError:  # the document is still being replaced by the navigation
                value = None
            if value:
                return value
            time.sleep(0.1)
        raise AssertionError(
            f"timed out waiting for {expression}; page: {self.eval('document.body.innerText')}"
        )

    def click(self, selector: str) -> None:
        """A real left click at the element's centre (mouse moved, pressed, released)."""
        x, y = self.wait(
            f"(() => {{ const e = document.querySelector({json.dumps(selector)}); if (!e) return null;"
            " e.scrollIntoView({block: 'center'}); const r = e.getBoundingClientRect();"
            " return [r.x + r.width / 2, r.y + r.height / 2]; })()"
        )
        self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)
        for kind in ("mousePressed", "mouseReleased"):
            self.call("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

    def type(self, selector: str, text: str, replace: bool = False) -> None:
        self.click(selector)
        if replace:
            self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.insertText", text=text)


@pytest.fixture
def browser(tmp_path: Path) -> Iterator[DevTools]:
    if CHROMIUM is None:
        pytest.fail("CI is set but chromium is missing: run .ci/chromium.sh first")
    profile = tmp_path / "chromium-profile"
    proc = subprocess.Popen(
        [CHROMIUM, *CHROMIUM_FLAGS, f"--user-data-dir={profile}", "about:blank"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        port_file = profile / "DevToolsActivePort"
        deadline = time.monotonic() + 60
        while not (port_file.exists() and port_file.read_text().strip()):
            assert proc.poll() is None, f"chromium exited with {proc.returncode}"
            assert time.monotonic() < deadline, "chromium did not open its DevTools port"
            time.sleep(0.1)
        port = int(port_file.read_text().split()[0])
        targets = httpx.get(f"http://127.0.0.1:{port}/json/list", timeout=10).json()
        page = next(t for t in targets if t["type"] == "page")
        with connect(page["webSocketDebuggerUrl"], max_size=None, open_timeout=30) as socket:
            yield DevTools(socket)
    finally:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


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

        browser.type(card.format("t03") + " .hp", '{"learning_rate": 0.0002, "max_steps": 7}', replace=True)
        browser.click(card.format("t03") + " .edit")
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
        browser.wait(f"document.querySelector('#token-file').textContent === {json.dumps(str(token_file))}")
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
        browser.click(card.format("t01") + " .approve")  # a viewer may look, not decide
        browser.wait(
            "document.querySelector('#message').textContent.includes('needs a bearer token of role')"
        )
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
