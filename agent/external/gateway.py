"""The model gateway: an external agent's LLM calls go through the host, metered, bounded and recorded, and the
agent never holds the real API key.

The token relay (`agent.external.driver.TokenRelay`) is the one address the agent's sandbox can reach; it hands every
`/v1/...` request here. The agent was given a per-run placeholder key (`rlloop-placeholder-<hex>`) in the variables
its ecosystem reads (`agent_env`); the gateway checks that key, swaps it for the real one (read on the host from the
variable the run names, never written to the sandbox), and forwards to the run's upstream. Before forwarding it
refuses, with an error in the protocol's own shape that the agent can read, a request past the run's token or
dollar cap (402: no client retries it), for a model outside the allowlist (403), or larger than the size cap (413).

It serves what real coding agents send: OpenAI's Chat Completions (OpenCode), Responses API (Codex) and legacy
completions, Anthropic's Messages with its beta query and headers and its free token count (Claude Code). Streamed
answers (server-sent events) pass through chunk by chunk and are counted from their usage events.

Caps hold when calls overlap: with a cap set, each call reserves what it may cost before it is forwarded (its prompt
bytes, which no tokenizer turns into more tokens, plus its output bound: the request's own, or one the gateway adds),
and a call that could cross the cap waits while others are in flight, so that what is spent past a cap is at most
one call's worth however many calls arrive at once. Every call is one JSON line in the run's transcript (outside
the agent's folder) and is handed to `on_call` (MLflow traces).
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import threading
import time
from collections.abc import Callable, Iterator, Mapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from pydantic import BaseModel, ConfigDict, Field

from agent.llm import Budget, PriceTable

if TYPE_CHECKING:
    from agent.run import RunConfig

PLACEHOLDER_PREFIX = "rlloop-placeholder-"
# The endpoints an agent may call, as (method, path under /v1): OpenAI's and Anthropic's messages.
ENDPOINTS = {
    ("POST", "/chat/completions"),
    ("POST", "/completions"),
    ("POST", "/responses"),
    ("POST", "/messages"),
    ("POST", "/messages/count_tokens"),
    ("GET", "/models"),
}
# Calls that run no model and cost nothing (Anthropic's token count): forwarded past a cap, never charged or held.
FREE_ENDPOINTS = {("POST", "/messages/count_tokens")}
ANTHROPIC_PATHS = ("/messages",)  # answered with Anthropic's error shape
# Where each API bounds a call's output (the first present wins), and the field the gateway sets when none is.
_OUTPUT_FIELDS = {
    "/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/completions": ("max_tokens",),
    "/responses": ("max_output_tokens",),
    "/messages": ("max_tokens",),
}
_OUTPUT_FIELD_SET = {
    "/chat/completions": "max_completion_tokens",
    "/completions": "max_tokens",
    "/responses": "max_output_tokens",
    "/messages": "max_tokens",
}
# The API's own output bound when a request names none (legacy completions stop at 16 tokens): nothing to add.
_OUTPUT_DEFAULTS = {"/completions": 16}
# A spent cap: 402 Payment Required, which the openai, Anthropic and ai-sdk clients never retry.
BUDGET_STATUS = 402
# Request headers never forwarded: hop-by-hop ones, those the gateway sets itself, and the agent's (fake) key.
_DROPPED = {
    "host",
    "content-length",
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "upgrade",
    "proxy-authorization",
    "accept-encoding",
    "authorization",
    "x-api-key",
    "openai-organization",  # the key's owner picks which account pays, not the agent
    "openai-project",
}
_KEPT_ANSWER_HEADERS = ("content-type", "retry-after", "x-request-id", "request-id")


class GatewayError(ValueError):
    """The gateway cannot be set up as configured (the key's variable is unset, a bad URL)."""


class GatewayConfig(BaseModel):
    """Where the agent's model calls go and what bounds them (built from a run's `agent_llm_*` fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1, description="The upstream's OpenAI-style base URL, ending in /v1.")
    key_env: str | None = Field(
        default=None, description="Host variable holding the real key (None: send no key)."
    )
    models: tuple[str, ...] = Field(default=(), description="Models the agent may use; empty: any.")
    max_request_bytes: int = Field(default=1_000_000, ge=1, description="Largest request body forwarded.")
    max_tokens: int | None = Field(
        default=None, ge=0, description="Tokens in + out the agent may use in the run."
    )
    max_usd: float | None = Field(
        default=None, ge=0, description="Dollars the agent's calls may cost in the run."
    )
    clip_bytes: int = Field(
        default=4096, ge=0, description="How much of each call's messages the transcript keeps."
    )
    default_max_output_tokens: int = Field(
        default=32_000,
        ge=1,
        description="With a cap set, the output bound added to a request that names none (Codex's Responses "
        "requests), so what the call may cost is known before it is forwarded; 32,000 is what Claude Code and "
        "OpenCode ask for themselves.",
    )
    timeout_s: float = Field(default=600.0, gt=0, description="Limit of one upstream call.")

    @classmethod
    def from_run(cls, config: RunConfig) -> GatewayConfig | None:
        """The gateway of a run with `agent_llm_base_url`; None without one (the agent gets no model)."""
        if not config.agent_llm_base_url:
            return None
        return cls(
            base_url=config.agent_llm_base_url,
            key_env=config.agent_llm_key_env,
            models=tuple(m for m in (config.agent_llm_models or "").split(",") if m),
            max_request_bytes=config.agent_llm_max_request_bytes,
            default_max_output_tokens=config.agent_llm_max_output_tokens,
            max_tokens=config.llm_max_tokens,
            max_usd=config.llm_max_usd,
        )


class GatewayCall(BaseModel):
    """One line of the transcript: one request the agent made, forwarded or refused."""

    time: float  # unix seconds when it arrived
    method: str
    path: str
    model: str | None = None
    stream: bool = False
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float
    refused: str | None = None  # why the gateway answered itself, without calling the upstream
    estimated: bool = False  # the upstream reported no usage: tokens estimated from bytes, counted high
    held_ms: float = 0.0  # how long the call waited for calls in flight before it could go (caps near)
    reserved_tokens: int = 0  # what the call reserved against the token cap while in flight
    request: str = ""  # the messages (or input, prompt), clipped
    response: str = ""  # the answer's text (or body), clipped


def new_placeholder() -> str:
    """A per-run key the agent's SDK can send: worthless anywhere but at this run's gateway."""
    return f"{PLACEHOLDER_PREFIX}{secrets.token_hex(16)}"


def agent_env(placeholder: str, base_url: str, models: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The variables OpenAI-, Anthropic- and LiteLLM-style agents read, pointing at the gateway at `base_url` (the
    relay's address as the agent sees it) with the placeholder key. `base_url` may be a shell reference
    (`${RLLOOP_GRADER_URL}`): the launcher expands it where the sandbox knows the address."""
    v1 = f"{base_url}/v1"
    env = {
        "OPENAI_API_KEY": placeholder,
        "OPENAI_BASE_URL": v1,
        "OPENAI_API_BASE": v1,  # LiteLLM's and the pre-1.0 openai SDK's name
        "ANTHROPIC_API_KEY": placeholder,
        "ANTHROPIC_BASE_URL": base_url,  # the Anthropic SDK appends /v1/messages itself
        "LITELLM_API_KEY": placeholder,
        "LITELLM_API_BASE": v1,
        "LITELLM_PROXY_API_KEY": placeholder,
        "LITELLM_PROXY_API_BASE": v1,
    }
    if models:
        env["OPENAI_MODEL"] = env["LLM_MODEL"] = models[0]
        env["LLM_MODELS"] = ",".join(models)
    return env


def _error(message: str, kind: str, code: str | None = None, anthropic: bool = False) -> bytes:
    """OpenAI's error shape (which the openai and LiteLLM SDKs, Codex and OpenCode surface as the message), or
    Anthropic's for its Messages paths (Claude Code)."""
    if anthropic:
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}
    ).encode()


def _clip(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def _usage(data: Any) -> tuple[int, int] | None:
    """(tokens in, tokens out) from a body's or event's `usage`: OpenAI chat/completions, Responses, Anthropic."""
    if not isinstance(data, dict):
        return None
    usage = data.get("usage")
    if not isinstance(usage, dict):
        response = data.get("response") or data.get(
            "message"
        )  # Responses' response.completed, Anthropic's start
        usage = response.get("usage") if isinstance(response, dict) else None
    if not isinstance(usage, dict):
        return None
    prompt = usage.get("prompt_tokens", usage.get("input_tokens"))
    completion = usage.get("completion_tokens", usage.get("output_tokens"))
    if prompt is None and completion is None:
        return None
    # Anthropic counts cached prompt tokens apart from input_tokens (OpenAI's prompt_tokens include them): all
    # are prompt tokens the call read, counted at the input price (high for cache reads, never low)
    cached = sum(int(usage.get(k) or 0) for k in ("cache_creation_input_tokens", "cache_read_input_tokens"))
    return int(prompt or 0) + cached, int(completion or 0)


def _delta_text(data: Any) -> str:
    """The text an SSE event adds (chat delta, completions text, Responses or Anthropic delta), for the transcript."""
    if not isinstance(data, dict):
        return ""
    for choice in data.get("choices") or []:
        if isinstance(choice, dict):
            delta = choice.get("delta") or {}
            return str(
                (delta.get("content") if isinstance(delta, dict) else None) or choice.get("text") or ""
            )
    delta = data.get("delta")
    if isinstance(delta, str):
        return delta
    if isinstance(delta, dict):
        return str(delta.get("text") or "")
    return ""


def _estimate_tokens(size: int) -> int:
    """Tokens in `size` bytes of JSON or text, counted high (about 4 bytes a token for English; less for JSON)."""
    return (size + 3) // 4


class _Meter:
    """Reads an SSE stream as it passes: the usage (the last event that has one wins; Anthropic splits it between
    message_start and message_delta) and the first bytes of the text."""

    def __init__(self, clip: int) -> None:
        self.clip = clip
        self.prompt = self.completion = 0
        self.text: list[str] = []
        self.received = 0  # bytes of the whole answer, for an estimate when the upstream reports no usage
        self._size = 0
        self._pending = b""

    def feed(self, chunk: bytes) -> None:
        self.received += len(chunk)
        self._pending += chunk
        *lines, self._pending = self._pending.split(b"\n")
        for line in lines:
            self._line(line.strip())

    def close(self) -> None:
        self._line(self._pending.strip())

    def _line(self, line: bytes) -> None:
        if not line.startswith(b"data:"):
            return
        payload = line[5:].strip()
        if not payload or payload == b"[DONE]":
            return
        try:
            data = json.loads(payload)
        except ValueError:
            return
        usage = _usage(data)
        if usage is not None:
            prompt, completion = usage
            self.prompt = prompt or self.prompt  # Anthropic's message_delta repeats no input count
            self.completion = completion or self.completion
        if self._size < self.clip:
            text = _delta_text(data)
            self.text.append(text)
            self._size += len(text)


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
        # admission: calls in flight and what they reserved (tokens, dollars), under one condition
        self._admission = threading.Condition()
        self._in_flight = 0
        self._reserved_tokens = 0
        self._reserved_usd = 0.0
        self._client = httpx.Client(timeout=httpx.Timeout(config.timeout_s, connect=30.0))
        transcript.parent.mkdir(parents=True, exist_ok=True)

    @staticmethod
    def handles(path: str) -> bool:
        """True for the paths the relay hands to the gateway."""
        return path == "/v1" or path.startswith("/v1/")

    def close(self) -> None:
        self._client.close()

    # -- the checks -------------------------------------------------------------------------------------------

    def limit_reason(self) -> str | None:
        """Why no more calls are forwarded (a cap of the run is spent), else None."""
        spent, c = self.budget.spent(), self.config
        if c.max_tokens is not None and spent.tokens >= c.max_tokens:
            return (
                f"the run's agent LLM token cap of {c.max_tokens} reached ({spent.tokens} tokens used in "
                f"{spent.llm_calls} calls); no more model calls are forwarded in this run"
            )
        if c.max_usd is not None and spent.usd >= c.max_usd:
            return (
                f"the run's agent LLM dollar cap of ${c.max_usd:.4f} reached (${spent.usd:.4f} spent in "
                f"{spent.llm_calls} calls); no more model calls are forwarded in this run"
            )
        return None

    @property
    def capped(self) -> bool:
        """True when the run has a token or dollar cap (then calls reserve what they may cost)."""
        return self.config.max_tokens is not None or self.config.max_usd is not None

    def _room(self) -> bool:
        """True while what is spent plus what calls in flight reserved stays under every cap."""
        spent, c = self.budget.spent(), self.config
        if c.max_tokens is not None and spent.tokens + self._reserved_tokens >= c.max_tokens:
            return False
        return not (c.max_usd is not None and spent.usd + self._reserved_usd >= c.max_usd)

    def _admit(self, tokens: int, usd: float) -> tuple[str | None, float]:
        """Wait until a call that may cost `tokens` and `usd` can go: at once while the calls in flight leave room
        under the caps, or when none is in flight; never while a cap is spent (then the reason, to refuse it).
        Returns (the refusal's reason or None, seconds waited). A call let through must be `_release`d."""
        started = time.monotonic()
        with self._admission:
            while True:
                reason = self.limit_reason()
                if reason is not None:
                    return reason, time.monotonic() - started
                if self._in_flight == 0 or self._room():
                    break
                self._admission.wait()
            self._in_flight += 1
            self._reserved_tokens += tokens
            self._reserved_usd += usd
        return None, time.monotonic() - started

    def _release(self, tokens: int, usd: float) -> None:
        """A call let through by `_admit` has ended (its cost recorded): its reservation goes, waiting calls look."""
        with self._admission:
            self._in_flight -= 1
            self._reserved_tokens -= tokens
            self._reserved_usd -= usd
            self._admission.notify_all()

    def _bound_output(self, sub: str, data: dict[str, Any]) -> tuple[int, bool]:
        """The most output tokens the call may produce, and whether the gateway had to set that bound itself (the
        request named none). `n` choices multiply it."""
        bound = None
        for name in _OUTPUT_FIELDS.get(sub, ()):
            value = data.get(name)
            if isinstance(value, int) and not isinstance(value, bool) and value > 0:
                bound = value
                break
        if bound is None:
            bound = _OUTPUT_DEFAULTS.get(sub)
        added = bound is None
        if bound is None:
            bound = self.config.default_max_output_tokens
            data[_OUTPUT_FIELD_SET[sub]] = bound
        choices = data.get("n")
        if isinstance(choices, int) and not isinstance(choices, bool) and choices > 1:
            bound *= choices
        return bound, added

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
            self._answer(handler, status, _error(message, kind, anthropic=anthropic), retry=False)
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
        call.request = _clip(
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
        if self.capped:
            output, added = self._bound_output(sub, data)
            changed = changed or added
            # a token is at least one byte of the text it stands for: the body's size bounds the prompt's tokens
            tokens = len(body) + output
            usd = self.prices.cost(call.model or "", len(body), output)
        if changed:
            body = json.dumps(data).encode()
        reason, held = self._admit(tokens, usd) if self.capped else (None, 0.0)
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
            if self.capped:
                self._release(tokens, usd)

    def _upstream_headers(self, handler: BaseHTTPRequestHandler) -> dict[str, str]:
        headers = {k: v for k, v in handler.headers.items() if k.lower() not in _DROPPED}
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
        meter = _Meter(self.config.clip_bytes)
        try:
            with self._client.stream("POST", url, content=body, headers=headers) as response:
                call.status = response.status_code
                kind = response.headers.get("content-type", "")
                if "text/event-stream" in kind and response.status_code == 200:
                    self._stream(handler, response, meter)
                    meter.close()
                    tokens = (meter.prompt, meter.completion)
                    call.response = _clip("".join(meter.text), self.config.clip_bytes)
                else:
                    content = self._scrub(response.read())
                    self._answer(handler, response.status_code, content, headers=response.headers)
                    try:
                        answer = json.loads(content)
                    except ValueError:
                        answer = None
                    tokens = _usage(answer) or (0, 0)
                    meter.received = len(content)
                    call.response = _clip(content.decode("utf-8", "replace"), self.config.clip_bytes)
        except (httpx.HTTPError, OSError) as exc:  # the upstream failed, or the agent hung up mid-answer
            tokens = (meter.prompt, meter.completion)
            if call.status == 0:  # nothing sent to the agent yet
                call.status, call.refused = 502, f"model upstream unreachable: {exc.__class__.__name__}"
                with contextlib.suppress(OSError):
                    message = f"{call.refused}; try again later"
                    anthropic = sub.startswith(ANTHROPIC_PATHS)
                    self._answer(handler, 502, _error(message, "upstream_error", anthropic=anthropic))
        if free:  # a token count: recorded, never charged
            self._record(call, started)
            return
        if tokens == (0, 0) and call.status == 200:
            # An upstream that reports no usage must not make the caps unreachable: count what crossed, high.
            tokens = (_estimate_tokens(len(body)), _estimate_tokens(meter.received))
            call.estimated = True
        call.prompt_tokens, call.completion_tokens = tokens
        call.cost_usd = self.prices.cost(call.model or "", *tokens)
        if call.refused is None:  # the upstream answered: a call of the run's, whatever its status
            self.budget.record_llm(call.prompt_tokens, call.completion_tokens, call.cost_usd)
        self._record(call, started)

    def _stream(self, handler: BaseHTTPRequestHandler, response: httpx.Response, meter: _Meter) -> None:
        """Pass an SSE answer through chunk by chunk (chunked transfer encoding), metering it on the way."""
        handler.send_response(200)
        for name in _KEPT_ANSWER_HEADERS:
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
            self._answer(handler, 502, _error(f"{call.refused}; try again later", "upstream_error"))
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
        call.response = _clip(content.decode("utf-8", "replace"), self.config.clip_bytes)
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
        for name in _KEPT_ANSWER_HEADERS:
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
