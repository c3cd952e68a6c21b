"""MLflow's own server app, opened on the training runs: what `rlloop ui` serves (an `mlflow.app` entry point).

MLflow 3.17's UI takes an experiment's kind from its GenAI / Model training switch, never from the experiment's
`mlflow.experimentKind` tag: the URL's `workflowType`, else the browser's localStorage `mlflow.workflowType_v1`,
else "genai". So a fresh browser opens every experiment, rlloop's training runs included, on the GenAI overview of
traces. This app is MLflow's unchanged but for two lines in its page: a browser that has never set the switch starts
on "Model training" (a reviewer who flips the switch keeps that choice; links that name `workflowType` still win), and
the bare address (`http://host:5000/`, what a person types or bookmarks) opens the training runs of the rlloop
experiment with the newest run, in the review view, instead of MLflow's welcome page. MLflow's own links (its
Experiments list, its logo) lead where they always did.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Awaitable, Callable, MutableMapping
from typing import Any

from mlflow.server.constants import BACKEND_STORE_URI_ENV_VAR
from mlflow.server.fastapi_app import app as mlflow_app

log = logging.getLogger(__name__)

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


def landing_script(route: str) -> bytes:
    """A script that sends a page opened at the bare address (no route in its fragment) to `route`, before MLflow's
    router reads the fragment; a page opened on any route is left alone."""
    return (
        "<script>try{var h=location.hash;if(h===''||h==='#'||h==='#/')"
        f"location.replace({json.dumps('#' + route)})}}catch(e){{}}</script>"
    ).encode()


def landing_route(tracking_uri: str | None = None) -> str | None:
    """The review view of the rlloop experiment whose newest run started last (`agent.tracking.review`'s link without
    its host); None when the store holds none or cannot be read (MLflow's welcome page then)."""
    from agent.tracking.review import ML_WORKFLOW, REVIEW_VIEW_KEY

    uri = tracking_uri or os.environ.get(BACKEND_STORE_URI_ENV_VAR)  # where `mlflow server` passes its store
    if not uri:
        return None
    try:
        from mlflow import MlflowClient

        client = MlflowClient(tracking_uri=uri)
        newest: tuple[int, str] | None = None
        for experiment in client.search_experiments(filter_string="name LIKE 'rlloop/%'"):
            runs = client.search_runs(
                [experiment.experiment_id], max_results=1, order_by=["attributes.start_time DESC"]
            )
            started = runs[0].info.start_time if runs else experiment.creation_time or 0
            if newest is None or started > newest[0]:
                newest = (int(started or 0), str(experiment.experiment_id))
    except Exception as exc:  # a busy or foreign store: MLflow's own page is still served
        log.warning("could not pick the landing experiment: %s", exc)
        return None
    if newest is None:
        return None
    return f"/experiments/{newest[1]}/runs?{ML_WORKFLOW}&viewStateShareKey={REVIEW_VIEW_KEY}"


def with_default_switch(page: bytes, route: str | None = None) -> bytes:
    """The UI's index page with the default-switch script (and, given a `route`, the landing script) first in its
    head (unchanged if it has no head)."""
    head = page.find(b"<head>")
    if head < 0:
        return page
    at = head + len(b"<head>")
    landing = landing_script(route) if route else b""
    return page[:at] + DEFAULT_SWITCH_SCRIPT + landing + page[at:]


class DefaultToModelTraining:
    """ASGI middleware: the UI's page (`/`, the single-page app's only HTML) gets `DEFAULT_SWITCH_SCRIPT` and the
    landing script; every other request and response passes through untouched, streamed."""

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
                page = with_default_switch(page, landing_route())
            await send({**start, "headers": [*headers, (b"content-length", str(len(page)).encode())]})
            await send({"type": "http.response.body", "body": page})

        await self.app(scope, receive, buffer)


app = DefaultToModelTraining(mlflow_app)
