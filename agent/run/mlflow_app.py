"""MLflow's own server app, opened on the training runs: what `rlloop ui` serves (an `mlflow.app` entry point).

MLflow 3.17's UI takes an experiment's kind from its GenAI / Model training switch, never from the experiment's
`mlflow.experimentKind` tag: the URL's `workflowType`, else the browser's localStorage `mlflow.workflowType_v1`,
else "genai". So a fresh browser opens every experiment, rlloop's training runs included, on the GenAI overview of
traces. This app is MLflow's unchanged but for one line in its page: a browser that has never set the switch starts
on "Model training". A reviewer who flips the switch keeps that choice; links that name `workflowType` still win.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mlflow.server.fastapi_app import app as mlflow_app

SWITCH_KEY = "mlflow.workflowType_v1"
DEFAULT_WORKFLOW = "machine_learning"
_KEY = json.dumps(SWITCH_KEY)
DEFAULT_SWITCH_SCRIPT = (
    f"<script>try{{if(localStorage.getItem({_KEY})===null)"
    f"localStorage.setItem({_KEY},{json.dumps(json.dumps(DEFAULT_WORKFLOW))})}}catch(e){{}}</script>"
).encode()

CONDITIONAL = (b"if-none-match", b"if-modified-since", b"range", b"if-range")
VALIDATORS = (b"content-length", b"etag", b"last-modified")  # of the file MLflow sent, not of the page served

Scope = MutableMapping[str, Any]
Message = MutableMapping[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
ASGIApp = Callable[[Scope, Receive, Send], Awaitable[None]]


def with_default_switch(page: bytes) -> bytes:
    """The UI's index page with the default-switch script first in its head (unchanged if it has no head)."""
    head = page.find(b"<head>")
    if head < 0:
        return page
    at = head + len(b"<head>")
    return page[:at] + DEFAULT_SWITCH_SCRIPT + page[at:]


class DefaultToModelTraining:
    """ASGI middleware: the UI's page (`/`, the single-page app's only HTML) gets `DEFAULT_SWITCH_SCRIPT`; every
    other request and response passes through untouched, streamed."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if (
            scope["type"] != "http"
            or scope.get("method") != "GET"
            or scope.get("path") not in ("/", "/index.html")
        ):
            await self.app(scope, receive, send)
            return
        # never a 304 for a page cached before this app served it (it would lack the script): always the whole page
        scope = {
            **scope,
            "headers": [(k, v) for k, v in scope.get("headers", []) if k.lower() not in CONDITIONAL],
        }
        start: Message | None = None
        body = bytearray()

        async def buffer(message: Message) -> None:
            nonlocal start
            if message["type"] == "http.response.start":
                start = message
                return
            if message["type"] != "http.response.body" or start is None:
                await send(message)
                return
            body.extend(message.get("body", b""))
            if message.get("more_body", False):
                return
            page = bytes(body)
            headers = [(k, v) for k, v in start.get("headers", []) if k.lower() not in VALIDATORS]
            if start.get("status") == 200 and any(
                k.lower() == b"content-type" and v.startswith(b"text/html") for k, v in headers
            ):
                page = with_default_switch(page)
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, buffer)


app = DefaultToModelTraining(mlflow_app)
