"""Real headless Chromium for the page tests, driven over the Chrome DevTools Protocol (no test framework).

`.ci/chromium.sh` installs Chromium; without it the page tests are skipped, except in CI (env CI set), where they fail.
"""

from __future__ import annotations

import base64
import json
import os
import shutil
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import httpx
import pytest
from websockets.sync.client import ClientConnection, connect

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


def skip_without_chromium() -> None:
    """Call at a test module's top: skip it where Chromium is missing, unless in CI."""
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

    def screenshot(self, path: Path, width: int, height: int = 900) -> Path:
        """The whole page at a given viewport width (a phone's, a laptop's), as PNG."""
        self.call(
            "Emulation.setDeviceMetricsOverride",
            width=width,
            height=height,
            deviceScaleFactor=1,
            mobile=width < 600,
        )
        time.sleep(0.3)
        full = self.eval("[document.documentElement.scrollWidth, document.documentElement.scrollHeight]")
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": 0, "y": 0, "width": max(width, full[0]), "height": full[1], "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        self.call("Emulation.clearDeviceMetricsOverride")
        return path

    def screenshot_element(self, selector: str, path: Path, width: int) -> Path:
        """One element (an approval card) at a viewport width, as PNG."""
        self.call(
            "Emulation.setDeviceMetricsOverride", width=width, height=900, deviceScaleFactor=1, mobile=False
        )
        time.sleep(0.3)
        x, y, w, h = self.eval(
            f"(() => {{ const r = document.querySelector({json.dumps(selector)}).getBoundingClientRect();"
            " return [r.x + scrollX, r.y + scrollY, r.width, r.height]; })()"
        )
        shot = self.call(
            "Page.captureScreenshot",
            format="png",
            captureBeyondViewport=True,
            clip={"x": x, "y": y, "width": w, "height": h, "scale": 1},
        )
        path.write_bytes(base64.b64decode(shot["data"]))
        self.call("Emulation.clearDeviceMetricsOverride")
        return path

    def type(self, selector: str, text: str, replace: bool = False) -> None:
        self.click(selector)
        if replace:
            self.eval(f"document.querySelector({json.dumps(selector)}).select()")
        self.call("Input.insertText", text=text)


@contextmanager
def chromium(folder: Path) -> Iterator[DevTools]:
    """A fresh Chromium (its own empty profile in `folder`: a fresh user) and its first tab."""
    if CHROMIUM is None:
        pytest.fail("CI is set but chromium is missing: run .ci/chromium.sh first")
    profile = folder / "chromium-profile"
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
