"""The token relay: the one address an external agent's sandbox can reach, on the host's 127.0.0.1.

Token: the rlloop grader wants `Authorization: Bearer <token>` on /submit, which an AutoRL-Bench agent never
sends. The token is never handed to the agent; instead a `TokenRelay` on the host's 127.0.0.1 forwards the
agent-facing endpoints (/submit, /health, /time, /scores, /best) to the grader with the header added, and refuses
everything else (/finalize above all). The sandbox's `network="grader"` makes that relay the only reachable host.
The relay also speaks AutoRL-Bench's dialect where rlloop's grader differs (`agent.external.autorl.AutoRLAdapter`).

Model: with `agent_llm_base_url` set, the same relay address also serves `/v1/...` through the model gateway
(`agent.external.gateway`): the agent gets OPENAI_*/ANTHROPIC_*/LITELLM_* variables pointing at it with a placeholder
key, and its calls are forwarded with the real key, metered against the run's caps and recorded. One address still
serves everything, so the sandbox's network stays as it is.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import httpx

from agent.external.autorl import AutoRLAdapter
from agent.external.gateway import ModelGateway

FORWARDED = {("POST", "/submit"), ("GET", "/health"), ("GET", "/time"), ("GET", "/scores"), ("GET", "/best")}


class _Server(ThreadingHTTPServer):
    """The relay's listener: a thread per connection, and a backlog for the calls a coding agent fires at once
    (socketserver's default of 5 reset connections when 20 arrived together)."""

    daemon_threads = True
    request_queue_size = 128


class TokenRelay:
    """An HTTP relay on 127.0.0.1 that adds the grader's bearer token to the endpoints an agent may use."""

    def __init__(
        self,
        upstream: str,
        token: str,
        timeout_s: float = 1800.0,
        adapter: AutoRLAdapter | None = None,
        gateway: ModelGateway | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.gateway = gateway
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms ACK stalls

            def _forward(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                if gateway is not None and gateway.handles(path):
                    gateway.serve(self, method)  # the agent's model calls: /v1/...
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if (method, path) not in FORWARDED:
                    self._answer(403, {"detail": f"{method} {path} is not open to agents"})
                    return
                sent = adapter.request_body(method, path, body) if adapter else body
                try:
                    response = httpx.request(
                        method,
                        f"{relay.upstream}{self.path}",
                        content=sent,
                        headers={
                            "Content-Type": self.headers.get("Content-Type", "application/json"),
                            "Authorization": f"Bearer {token}",
                        },
                        timeout=timeout_s,
                    )
                except httpx.HTTPError as exc:
                    self._answer(502, {"detail": f"grading server unreachable: {exc}"})
                    return
                content = response.content
                if adapter is not None:
                    content = adapter.response_body(method, path, response.status_code, content, body)
                self._raw(response.status_code, content, response.headers.get("content-type", ""))

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                self._raw(
                    status, json.dumps({**payload, "error": payload["detail"]}).encode(), "application/json"
                )

            def _raw(self, status: int, content: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/octet-stream")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

        self._server = _Server(("127.0.0.1", 0), Handler)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rlloop-token-relay", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
