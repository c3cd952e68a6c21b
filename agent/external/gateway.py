"""The model gateway: an external agent's LLM calls go through the host, metered, bounded and recorded, and the
agent never holds the real API key.

The token relay (`agent.external.relay.TokenRelay`) is the one address the agent's sandbox can reach; it hands every
`/v1/...` request here. The agent was given a per-run placeholder key (`rlloop-placeholder-<hex>`) in the variables
its ecosystem reads (`agent_env`); the gateway checks that key, swaps it for the real one (read on the host from the
variable the run names, never written to the sandbox), and forwards to the run's upstream. Before forwarding it
refuses, with an error in the protocol's own shape that the agent can read, a request past the run's token or
dollar cap (402: no client retries it), for a model outside the allowlist (403), or larger than the size cap (413).

It serves what real coding agents send: OpenAI's Chat Completions (OpenCode), Responses API (Codex) and legacy
completions, Anthropic's Messages with its beta query and headers and its free token count (Claude Code). Streamed
answers (server-sent events) pass through chunk by chunk and are counted from their usage events.

Caps hold when calls overlap (`agent.external.gateway_caps`): each call reserves its prompt bytes, which no tokenizer
turns into more tokens, plus its output bound (the request's own, or one the gateway adds). The APIs' shapes:
`agent.external.gateway_wire`; the config, the placeholder key and the agent's variables:
`agent.external.gateway_setup`. Every call is one JSON line in the run's transcript (outside the agent's folder) and
is handed to `on_call` (MLflow traces).
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path

import httpx

from agent.external.gateway_caps import CallCaps
from agent.external.gateway_setup import GatewayCall, GatewayConfig, GatewayError, new_placeholder
from agent.external.gateway_wire import (
    ANTHROPIC_PATHS,
    BUDGET_STATUS,
    DROPPED_HEADERS,
    ENDPOINTS,
    FREE_ENDPOINTS,
    KEPT_ANSWER_HEADERS,
    StreamMeter,
    bound_output,
    clip,
    error_body,
    estimate_tokens,
    usage_of,
)
from agent.llm import Budget, PriceTable


class ModelGateway:
    """Serves `/v1/...` for the relay's handler: checks, forwards with the real key, meters, records."""

    def __init__(
        self,
        config: GatewayConfig,
        *,
        budget: Budget,
        transcript: Path,
        prices: PriceTable | None = None,
        placeholder: str | None = None,
        environ: Mapping[str, str] | None = None,
        on_call: Callable[[GatewayCall], None] | None = None,
    ) -> None:
        env = os.environ if environ is None else environ
        if not config.base_url.startswith(("http://", "https://")):
            raise GatewayError(f"agent LLM base URL {config.base_url!r} must start with http:// or https://")
        self._key = ""
        if config.key_env:
            self._key = env.get(config.key_env, "")
            if not self._key:
                raise GatewayError(
                    f"the agent LLM key variable {config.key_env} is not set on this host: export it (the key "
                    "stays on the host; the agent gets a placeholder), or leave --agent-llm-key-env out for an "
                    "upstream that needs no key"
                )
        self.config = config
        self.upstream = config.base_url.rstrip("/")
        self.budget = budget
        self.prices = prices or PriceTable.from_env()
        self.placeholder = placeholder or new_placeholder()
        self.transcript = transcript
        self.on_call = on_call
        self.stop_reason: str | None = None  # the first cap that refused a call
        self.refusals = 0
        self._lock = threading.Lock()
        self.caps = CallCaps(config, budget)
        self._client = httpx.Client(timeout=httpx.Timeout(config.timeout_s, connect=30.0))
        transcript.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def handles(path: str) -> bool:
        """True for the paths the relay hands to the gateway."""
        return path == "/v1" or path.startswith("/v1/")

    def close(self) -> None:
        self._client.close()

    def limit_reason(self) -> str | None:
        """Why no more calls are forwarded (a cap of the run is spent), else None."""
        return self.caps.limit_reason()

    def _presented_key(self, handler: BaseHTTPRequestHandler) -> str:
        auth = handler.headers.get("Authorization", "")
        if auth.lower().startswith("bearer "):
            return auth[7:].strip()
        return handler.headers.get("x-api-key", "").strip()

    # -- serving ----------------------------------------------------------------------------------------------

    def serve(self, handler: BaseHTTPRequestHandler, method: str) -> None:
        """Answer one request on `handler` (its headers read, its body not yet)."""
        started, arrived = time.perf_counter(), time.time()
        path, _, query = handler.path.partition("?")
        sub = path[len("/v1") :] or "/"
        call = GatewayCall(time=arrived, method=method, path=path, status=0, latency_ms=0.0)

        anthropic = sub.startswith(ANTHROPIC_PATHS)

        def refuse(status: int, message: str, kind: str) -> None:
            call.status, call.refused = status, message
            self._answer(handler, status, error_body(message, kind, anthropic=anthropic), retry=False)
            self._record(call, started)

        length = handler.headers.get("Content-Length")
        if method == "POST" and length is None:
            handler.close_connection = True
            refuse(411, "send the request body with a Content-Length header", "invalid_request_error")
            return
        try:
            size = int(length or 0)
        except ValueError:
            size = -1
        if size < 0:
            handler.close_connection = True
            refuse(400, f"Content-Length {length!r} is not a byte count", "invalid_request_error")
            return
        if size > self.config.max_request_bytes:
            handler.close_connection = True  # the body is left unread
            refuse(
                413,
                f"request of {size} bytes is over the gateway's cap of {self.config.max_request_bytes} bytes per "
                "request: send fewer or shorter messages",
                "request_too_large",
            )
            return
        body = handler.rfile.read(size) if size else b""
        if (method, sub) not in ENDPOINTS:
            open_ = ", ".join(f"{m} /v1{p}" for m, p in sorted(ENDPOINTS))
            refuse(404, f"{method} {path} is not served by the model gateway; it serves {open_}", "not_found")
            return
        if self._presented_key(handler) != self.placeholder:
            refuse(
                401,
                "wrong API key: use the key in OPENAI_API_KEY (or ANTHROPIC_API_KEY) that this run gave you",
                "invalid_api_key",
            )
            return
        if method == "GET":
            self._forward_models(handler, call, query, started)
            return
        try:
            data = json.loads(body)
        except ValueError:
            refuse(400, "the request body is not valid JSON", "invalid_request_error")
            return
        if not isinstance(data, dict):
            refuse(400, "the request body must be a JSON object", "invalid_request_error")
            return
        model = data.get("model")
        call.model = model if isinstance(model, str) else None
        call.stream = bool(data.get("stream"))
        call.request = clip(
            {k: data[k] for k in ("system", "instructions", "messages", "input", "prompt") if k in data},
            self.config.clip_bytes,
        )
        allowed = self.config.models
        if allowed and call.model not in allowed:
            refuse(
                403,
                f"model {call.model!r} is not allowed in this run; use one of: {', '.join(allowed)}",
                "model_not_allowed",
            )
            return
        if (method, sub) in FREE_ENDPOINTS:  # no model runs: nothing to cap, reserve or charge
            self._forward(handler, call, sub, query, body, started, free=True)
            return
        changed = False
        if call.stream and sub in ("/chat/completions", "/completions"):
            options = data.get("stream_options")
            if not isinstance(options, dict) or not options.get("include_usage"):
                data["stream_options"] = {
                    **(options if isinstance(options, dict) else {}),
                    "include_usage": True,
                }
                changed = True
        tokens, usd = 0, 0.0
        if self.caps.capped:
            output, added = bound_output(sub, data, self.config.default_max_output_tokens)
            changed = changed or added
            # a token is at least one byte of the text it stands for: the body's size bounds the prompt's tokens
            tokens = len(body) + output
            usd = self.prices.cost(call.model or "", len(body), output)
        if changed:
            body = json.dumps(data).encode()
        reason, held = self.caps.admit(tokens, usd) if self.caps.capped else (None, 0.0)
        call.held_ms = round(held * 1000, 3)
        if reason is not None:
            with self._lock:
                self.stop_reason = self.stop_reason or reason
                self.refusals += 1
            refuse(BUDGET_STATUS, reason, "budget_exceeded")
            return
        call.reserved_tokens = tokens
        try:
            self._forward(handler, call, sub, query, body, started)
        finally:
            if self.caps.capped:
                self.caps.release(tokens, usd)

    def _upstream_headers(self, handler: BaseHTTPRequestHandler) -> dict[str, str]:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in DROPPED_HEADERS}
        headers["Accept-Encoding"] = "identity"  # chunks pass through as they come, never re-encoded
        if self._key:
            if handler.headers.get("x-api-key") is not None:
                headers["x-api-key"] = self._key
            else:
                headers["Authorization"] = f"Bearer {self._key}"
        return headers

    def _forward(
        self,
        handler: BaseHTTPRequestHandler,
        call: GatewayCall,
        sub: str,
        query: str,
        body: bytes,
        started: float,
        free: bool = False,
    ) -> None:
        url = f"{self.upstream}{sub}" + (f"?{query}" if query else "")
        headers = self._upstream_headers(handler)
        meter = StreamMeter(self.config.clip_bytes)
        try:
            with self._client.stream("POST", url, content=body, headers=headers) as response:
                call.status = response.status_code
                kind = response.headers.get("content-type", "")
                if "text/event-stream" in kind and response.status_code == 200:
                    self._stream(handler, response, meter)
                    meter.close()
                    tokens = (meter.prompt, meter.completion)
                    call.response = clip("".join(meter.text), self.config.clip_bytes)
                else:
                    content = self._scrub(response.read())
                    self._answer(handler, response.status_code, content, headers=response.headers)
                    try:
                        answer = json.loads(content)
                    except ValueError:
                        answer = None
                    tokens = usage_of(answer) or (0, 0)
                    meter.received = len(content)
                    call.response = clip(content.decode("utf-8", "replace"), self.config.clip_bytes)
        except (httpx.HTTPError, OSError) as exc:  # the upstream failed, or the agent hung up mid-answer
            tokens = (meter.prompt, meter.completion)
            if call.status == 0:  # nothing sent to the agent yet
                call.status, call.refused = 502, f"model upstream unreachable: {exc.__class__.__name__}"
                with contextlib.suppress(OSError):
                    message = f"{call.refused}; try again later"
                    anthropic = sub.startswith(ANTHROPIC_PATHS)
                    self._answer(handler, 502, error_body(message, "upstream_error", anthropic=anthropic))
        if free:  # a token count: recorded, never charged
            self._record(call, started)
            return
        if tokens == (0, 0) and call.status == 200:
            # An upstream that reports no usage must not make the caps unreachable: count what crossed, high.
            tokens = (estimate_tokens(len(body)), estimate_tokens(meter.received))
            call.estimated = True
        call.prompt_tokens, call.completion_tokens = tokens
        call.cost_usd = self.prices.cost(call.model or "", *tokens)
        if call.refused is None:  # the upstream answered: a call of the run's, whatever its status
            self.budget.record_llm(call.prompt_tokens, call.completion_tokens, call.cost_usd)
        self._record(call, started)

    def _stream(self, handler: BaseHTTPRequestHandler, response: httpx.Response, meter: StreamMeter) -> None:
        """Pass an SSE answer through chunk by chunk (chunked transfer encoding), metering it on the way."""
        handler.send_response(200)
        for name in KEPT_ANSWER_HEADERS:
            if name in response.headers:
                handler.send_header(name, response.headers[name])
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for chunk in self._chunks(response):
            meter.feed(chunk)
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(chunk), chunk))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _chunks(self, response: httpx.Response) -> Iterator[bytes]:
        """The answer's chunks, scrubbed; the last len(key) - 1 bytes of each wait for the next chunk, so a key split
        across two chunks is still found."""
        keep = max(len(self._key.encode()) - 1, 0)
        held = b""
        for chunk in response.iter_bytes():
            if not chunk:
                continue
            text = self._scrub(held + chunk)
            cut = len(text) - keep if keep and not text.endswith(b"\n\n") else len(text)
            text, held = text[:cut], text[cut:]
            if text:
                yield text
        if held:
            yield self._scrub(held)

    def _forward_models(
        self, handler: BaseHTTPRequestHandler, call: GatewayCall, query: str, started: float
    ) -> None:
        """GET /v1/models, the list cut to the allowed models (an agent picking from it picks one it may use)."""
        url = f"{self.upstream}/models" + (f"?{query}" if query else "")
        try:
            response = self._client.get(url, headers=self._upstream_headers(handler))
        except httpx.HTTPError as exc:
            call.status, call.refused = 502, f"model upstream unreachable: {exc.__class__.__name__}"
            self._answer(handler, 502, error_body(f"{call.refused}; try again later", "upstream_error"))
            self._record(call, started)
            return
        content = self._scrub(response.content)
        allowed = self.config.models
        if allowed and response.status_code == 200:
            try:
                listing = json.loads(content)
                listing["data"] = [m for m in listing.get("data", []) if m.get("id") in allowed]
                content = json.dumps(listing).encode()
            except (ValueError, AttributeError, TypeError):
                pass
        call.status = response.status_code
        call.response = clip(content.decode("utf-8", "replace"), self.config.clip_bytes)
        self._answer(handler, response.status_code, content, headers=response.headers)
        self._record(call, started)

    # -- answers and records ----------------------------------------------------------------------------------

    def _scrub(self, content: bytes) -> bytes:
        """The real key never goes back to the agent, even if an upstream echoes it."""
        if self._key and self._key.encode() in content:
            return content.replace(self._key.encode(), b"[key removed]")
        return content

    def _answer(
        self,
        handler: BaseHTTPRequestHandler,
        status: int,
        content: bytes,
        headers: Mapping[str, str] | None = None,
        retry: bool = True,
    ) -> None:
        handler.send_response(status)
        sent_type = False
        for name in KEPT_ANSWER_HEADERS:
            if headers is not None and name in headers:
                handler.send_header(name, headers[name])
                sent_type = sent_type or name == "content-type"
        if not sent_type:
            handler.send_header("Content-Type", "application/json")
        if not retry:  # the openai and anthropic SDKs read this: a refusal is final, retrying it is pointless
            handler.send_header("x-should-retry", "false")
        if handler.close_connection:  # a body left unread: the client must not reuse this connection
            handler.send_header("Connection", "close")
        handler.send_header("Content-Length", str(len(content)))
        handler.end_headers()
        handler.wfile.write(content)

    def _record(self, call: GatewayCall, started: float) -> None:
        call.latency_ms = round((time.perf_counter() - started) * 1000, 3)
        line = call.model_dump_json()
        if self._key:
            line = line.replace(self._key, "[key removed]")
        with self._lock, open(self.transcript, "a", encoding="utf-8") as out:
            out.write(line + "\n")
        if self.on_call is not None:
            with contextlib.suppress(Exception):  # recording for review never breaks the agent's call
                self.on_call(call)
