"""A real OpenAI-compatible HTTP server for tests, replying from a script the test writes.

It speaks the Chat Completions wire format (`POST /v1/chat/completions`, streamed as server-sent events with
`"stream": true` and the usage chunk of `stream_options.include_usage`; `GET /v1/models`), and Anthropic's
`POST /v1/messages` (plain and streamed) from the same script, over a real socket on
127.0.0.1, so the real `openai` SDK, its HTTP stack and the code under test all run unmodified. Each chat request
pops the next `ScriptedReply`: a message (content, finish_reason, usage), tool calls (`tool_calls` in the message,
finish_reason "tool_calls"), an HTTP error (status, Retry-After), after an optional delay. Endpoint-level checks
(API key, model name, supported `response_format` types, well-formed `tools`, every assistant `tool_calls` answered
by `role: tool` messages) answer before the script is consulted, the way a real server would. Every request is
recorded for assertions on prompts.

    with ScriptedOpenAIServer(models=["test-model"]) as server:
        server.enqueue(reply({"answer": 42}), error(429, retry_after=0.1))
        server.enqueue(tool_calls(call("data_rows", {"limit": 2})), reply({"answer": 42}))
        client = OpenAI(base_url=server.base_url, api_key="k")
"""

from __future__ import annotations

import asyncio
import collections
import json
import math
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn
from fastapi import FastAPI, Request, Response
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, Field

RESPONSE_FORMATS = frozenset({"text", "json_object", "json_schema"})
_ERROR_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    403: "permission_error",
    404: "invalid_request_error",
    429: "rate_limit_error",
}


class ScriptedReply(BaseModel):
    """One answer to one chat request: a message (status 200) or an HTTP error."""

    status: int = 200
    content: str | None = None
    finish_reason: str = "stop"
    refusal: str | None = None
    prompt_tokens: int | None = None  # default: ceil(characters of all message contents / 4)
    completion_tokens: int | None = None  # default: ceil(characters of content / 4)
    omit_usage: bool = False
    error_message: str = ""
    error_code: str | None = None
    headers: dict[str, str] = Field(default_factory=dict)
    delay_s: float = 0.0
    tool_calls: list[dict[str, Any]] | None = None  # OpenAI's [{"id", "type": "function", "function": {...}}]


def reply(content: str | dict[str, Any] | None, **fields: Any) -> ScriptedReply:
    """A 200 answer; a dict is sent as its JSON text, as a server in JSON mode would."""
    text = json.dumps(content) if isinstance(content, dict) else content
    return ScriptedReply(content=text, **fields)


def call(name: str, arguments: dict[str, Any] | str, call_id: str | None = None) -> dict[str, Any]:
    """One tool call as OpenAI sends it: the arguments are a JSON string (a str is sent as given, even if broken)."""
    text = arguments if isinstance(arguments, str) else json.dumps(arguments)
    ident = call_id or f"call_{name}_{abs(hash((name, text))) % 10**8}"
    return {"id": ident, "type": "function", "function": {"name": name, "arguments": text}}


def tool_calls(*calls: dict[str, Any], content: str | None = None, **fields: Any) -> ScriptedReply:
    """A 200 answer in which the model calls tools instead of answering (finish_reason "tool_calls")."""
    return ScriptedReply(content=content, tool_calls=list(calls), finish_reason="tool_calls", **fields)


def error(
    status: int, message: str = "", *, retry_after: float | None = None, **fields: Any
) -> ScriptedReply:
    """An HTTP error in OpenAI's `{"error": {...}}` shape, optionally with a Retry-After header."""
    headers = dict(fields.pop("headers", {}))
    if retry_after is not None:
        headers["retry-after"] = f"{retry_after:g}"
    return ScriptedReply(
        status=status, error_message=message or f"scripted HTTP {status}", headers=headers, **fields
    )


class RecordedRequest(BaseModel):
    """A request as the server received it."""

    method: str
    path: str
    headers: dict[str, str]
    body: dict[str, Any] = Field(default_factory=dict)
    received_at: float

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))

    @property
    def tool_names(self) -> list[str]:
        """The functions the request offered the model."""
        return [t["function"]["name"] for t in self.body.get("tools") or []]

    def text(self) -> str:
        """All message contents joined: what the model was shown."""
        return "\n".join(str(m.get("content") or "") for m in self.messages)


def _error_response(
    status: int,
    message: str,
    code: str | None = None,
    param: str | None = None,
    headers: dict[str, str] | None = None,
) -> JSONResponse:
    kind = _ERROR_TYPES.get(status, "server_error" if status >= 500 else "invalid_request_error")
    body = {"error": {"message": message, "type": kind, "param": param, "code": code}}
    return JSONResponse(body, status_code=status, headers=headers)


def _tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


def _tool_problem(body: dict[str, Any]) -> JSONResponse | None:
    """The 400s OpenAI answers for malformed tools or a tool-call history that does not pair up."""
    tools = body.get("tools")
    if tools is not None:
        if not isinstance(tools, list) or not tools:
            return _error_response(400, "'tools' must be a non-empty array", param="tools")
        for tool in tools:
            function = tool.get("function") if isinstance(tool, dict) else None
            if tool.get("type") != "function" or not isinstance(function, dict) or not function.get("name"):
                return _error_response(
                    400, "each tool needs type 'function' and a function with a 'name'", param="tools"
                )
            if not isinstance(function.get("parameters", {}), dict):
                return _error_response(400, "a function's 'parameters' must be a JSON schema", param="tools")
    if body.get("tool_choice") is not None and not tools:
        return _error_response(
            400, "Invalid value for 'tool_choice': 'tool_choice' is only allowed when 'tools' are specified."
        )
    open_ids: list[str] = []
    for message in body["messages"]:
        if message["role"] == "tool":
            if message.get("tool_call_id") not in open_ids:
                return _error_response(
                    400,
                    "Invalid parameter: messages with role 'tool' must be a response to a preceeding message "
                    "with 'tool_calls'.",
                    param="messages",
                )
            open_ids.remove(message["tool_call_id"])
            continue
        if open_ids:
            return _error_response(
                400,
                "An assistant message with 'tool_calls' must be followed by tool messages responding to each "
                f"'tool_call_id'. The following tool_call_ids did not have response messages: {', '.join(open_ids)}",
                param="messages",
            )
        if message["role"] == "assistant":
            open_ids = [str(c.get("id")) for c in message.get("tool_calls") or []]
    if open_ids:
        return _error_response(
            400, f"tool_call_ids without response messages: {', '.join(open_ids)}", param="messages"
        )
    return None


def _sse(payload: dict[str, Any], body: dict[str, Any]) -> Iterator[str]:
    """A completion as OpenAI streams it: `chat.completion.chunk` events (the role, the content in pieces, the
    finish reason), then with `stream_options.include_usage` one more with empty `choices` and the usage (every
    earlier chunk has `"usage": null`), then `data: [DONE]`."""
    options = body.get("stream_options") or {}
    with_usage = bool(isinstance(options, dict) and options.get("include_usage"))
    choice, message = payload["choices"][0], payload["choices"][0]["message"]
    base = {k: payload[k] for k in ("id", "created", "model", "system_fingerprint")}
    base["object"] = "chat.completion.chunk"

    def event(choices: list[dict[str, Any]], **extra: Any) -> str:
        chunk = {**base, "choices": choices, **({"usage": None} if with_usage else {}), **extra}
        return f"data: {json.dumps(chunk)}\n\n"

    yield event([{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}])
    text = message.get("content") or ""
    for start in range(0, len(text), 8):
        yield event([{"index": 0, "delta": {"content": text[start : start + 8]}, "finish_reason": None}])
    for position, tool_call in enumerate(message.get("tool_calls") or []):
        yield event(
            [{"index": 0, "delta": {"tool_calls": [{"index": position, **tool_call}]}, "finish_reason": None}]
        )
    yield event([{"index": 0, "delta": {}, "finish_reason": choice["finish_reason"]}])
    if with_usage and "usage" in payload:
        yield event([], usage=payload["usage"])
    yield "data: [DONE]\n\n"


def _anthropic_sse(message: dict[str, Any]) -> Iterator[str]:
    """A message as Anthropic streams it: the input tokens in message_start, the output tokens in message_delta."""
    usage = message["usage"]
    start = {
        **message,
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": usage["input_tokens"], "output_tokens": 1},
    }
    events: list[tuple[str, dict[str, Any]]] = [
        ("message_start", {"type": "message_start", "message": start}),
        (
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
        ),
    ]
    text = message["content"][0]["text"]
    for begin in range(0, len(text), 8):
        delta = {"type": "text_delta", "text": text[begin : begin + 8]}
        events.append(("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}))
    events += [
        ("content_block_stop", {"type": "content_block_stop", "index": 0}),
        (
            "message_delta",
            {
                "type": "message_delta",
                "delta": {"stop_reason": "end_turn", "stop_sequence": None},
                "usage": {"output_tokens": usage["output_tokens"]},
            },
        ),
        ("message_stop", {"type": "message_stop"}),
    ]
    for name, data in events:
        yield f"event: {name}\ndata: {json.dumps(data)}\n\n"


class ScriptedOpenAIServer:
    """Serve the OpenAI chat API on 127.0.0.1:<free port> from a background thread."""

    def __init__(
        self,
        models: list[str] | tuple[str, ...] = ("test-model",),
        *,
        api_key: str | None = None,
        response_formats: frozenset[str] | set[str] = RESPONSE_FORMATS,
    ) -> None:
        self.models = list(models)
        self.api_key = api_key
        self.response_formats = frozenset(response_formats)
        self.requests: list[RecordedRequest] = []
        self._script: collections.deque[ScriptedReply] = collections.deque()
        self._lock = threading.Lock()
        self._completions = 0
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None
        self._socket: socket.socket | None = None
        self.app = self._build_app()

    # -- script and records -------------------------------------------------------------------------------

    def enqueue(self, *replies: ScriptedReply) -> None:
        with self._lock:
            self._script.extend(replies)

    @property
    def pending(self) -> int:
        with self._lock:
            return len(self._script)

    def chat_requests(self) -> list[RecordedRequest]:
        with self._lock:
            return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def base_url(self) -> str:
        if self._socket is None:
            raise RuntimeError("server not started")
        return f"http://127.0.0.1:{self._socket.getsockname()[1]}/v1"

    # -- lifecycle ----------------------------------------------------------------------------------------

    def start(self) -> ScriptedOpenAIServer:
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", 0))  # the OS picks a free port; the bound socket is handed over, so no race
        self._socket = sock
        config = uvicorn.Config(
            self.app, log_level="warning", lifespan="off", access_log=False, timeout_graceful_shutdown=1
        )
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._server.run, kwargs={"sockets": [sock]}, name="scripted-openai", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + 15
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted OpenAI server did not start")
            time.sleep(0.01)
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)
        if self._socket is not None:
            self._socket.close()
        self._server = self._thread = None

    def __enter__(self) -> ScriptedOpenAIServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # -- the API ------------------------------------------------------------------------------------------

    def _record(self, request: Request, body: dict[str, Any]) -> None:
        record = RecordedRequest(
            method=request.method,
            path=request.url.path,
            headers={k.lower(): v for k, v in request.headers.items()},
            body=body,
            received_at=time.time(),
        )
        with self._lock:
            self.requests.append(record)

    def _auth_error(self, request: Request) -> JSONResponse | None:
        if self.api_key is None:
            return None
        if request.headers.get("authorization", "") != f"Bearer {self.api_key}":
            return _error_response(401, "Incorrect API key provided.", code="invalid_api_key")
        return None

    def _check_body(self, body: dict[str, Any]) -> JSONResponse | None:
        model = body.get("model")
        if not isinstance(model, str) or not model:
            return _error_response(400, "you must provide a model parameter", param="model")
        if model not in self.models:
            return _error_response(
                404,
                f"The model `{model}` does not exist or you do not have access to it.",
                code="model_not_found",
            )
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error_response(400, "'messages' must be a non-empty array", param="messages")
        for message in messages:
            if not isinstance(message, dict) or "role" not in message:
                return _error_response(400, "each message needs a 'role'", param="messages")
        problem = _tool_problem(body)
        if problem is not None:
            return problem
        fmt = body.get("response_format")
        if fmt is None:
            return None
        kind = fmt.get("type") if isinstance(fmt, dict) else None
        if kind not in RESPONSE_FORMATS:
            return _error_response(400, f"Invalid response_format type: {kind!r}", param="response_format")
        if kind not in self.response_formats:
            return _error_response(
                400, f"response_format type '{kind}' is not supported by this server", param="response_format"
            )
        if kind == "json_schema":
            spec = fmt.get("json_schema")
            if not isinstance(spec, dict) or not spec.get("name") or not isinstance(spec.get("schema"), dict):
                return _error_response(
                    400,
                    "response_format.json_schema needs 'name' and an object 'schema'",
                    param="response_format",
                )
        return None

    def _completion(self, body: dict[str, Any], scripted: ScriptedReply) -> dict[str, Any]:
        with self._lock:
            self._completions += 1
            number = self._completions
        prompt_text = "".join(str(m.get("content") or "") for m in body["messages"])
        prompt_tokens = scripted.prompt_tokens if scripted.prompt_tokens is not None else _tokens(prompt_text)
        reply_text = (scripted.content or "") + json.dumps(scripted.tool_calls or "")
        completion_tokens = (
            scripted.completion_tokens if scripted.completion_tokens is not None else _tokens(reply_text)
        )
        payload: dict[str, Any] = {
            "id": f"chatcmpl-scripted-{number}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": body["model"],
            "system_fingerprint": "scripted-openai",
            "choices": [
                {
                    "index": 0,
                    "message": {
                        "role": "assistant",
                        "content": scripted.content,
                        "refusal": scripted.refusal,
                        **({"tool_calls": scripted.tool_calls} if scripted.tool_calls else {}),
                    },
                    "logprobs": None,
                    "finish_reason": scripted.finish_reason,
                }
            ],
        }
        if not scripted.omit_usage:
            payload["usage"] = {
                "prompt_tokens": prompt_tokens,
                "completion_tokens": completion_tokens,
                "total_tokens": prompt_tokens + completion_tokens,
            }
        return payload

    def _build_app(self) -> FastAPI:
        app = FastAPI(title="scripted OpenAI-compatible server")

        @app.get("/v1/models")
        async def list_models(request: Request) -> JSONResponse:
            self._record(request, {})
            denied = self._auth_error(request)
            if denied is not None:
                return denied
            data = [
                {"id": m, "object": "model", "created": 0, "owned_by": "rlloop-tests"} for m in self.models
            ]
            return JSONResponse({"object": "list", "data": data})

        @app.post("/v1/chat/completions")
        async def chat_completions(request: Request) -> Response:
            try:
                body = await request.json()
            except ValueError:
                self._record(request, {})
                return _error_response(400, "request body is not valid JSON")
            if not isinstance(body, dict):
                body = {"_raw": body}
            self._record(request, body)
            problem = self._auth_error(request) or self._check_body(body)
            if problem is not None:
                return problem
            with self._lock:
                scripted = self._script.popleft() if self._script else None
            if scripted is None:
                return _error_response(
                    500,
                    "scripted server: the script is exhausted (the test enqueued fewer replies than requests)",
                )
            if scripted.delay_s:
                await asyncio.sleep(scripted.delay_s)
            if scripted.status != 200:
                return _error_response(
                    scripted.status,
                    scripted.error_message,
                    code=scripted.error_code,
                    headers=scripted.headers,
                )
            payload = self._completion(body, scripted)
            if body.get("stream"):
                return StreamingResponse(
                    _sse(payload, body), media_type="text/event-stream", headers=scripted.headers
                )
            return JSONResponse(payload, headers=scripted.headers)

        @app.post("/v1/messages")
        async def messages(request: Request) -> Response:
            """Anthropic's Messages API (`x-api-key`, `content` blocks, `input_tokens`/`output_tokens`; streamed as
            message_start ... message_stop events), answered from the same script."""
            body = await request.json()
            self._record(request, body)
            if self.api_key is not None and request.headers.get("x-api-key") != self.api_key:
                error = {"type": "authentication_error", "message": "invalid x-api-key"}
                return JSONResponse({"type": "error", "error": error}, status_code=401)
            if body.get("model") not in self.models or not body.get("max_tokens"):
                error = {
                    "type": "invalid_request_error",
                    "message": "a known model and max_tokens are required",
                }
                return JSONResponse({"type": "error", "error": error}, status_code=400)
            with self._lock:
                scripted = self._script.popleft() if self._script else None
            text = (scripted.content if scripted else None) or ""
            prompt_text = "".join(str(m.get("content") or "") for m in body.get("messages") or [])
            usage = {
                "input_tokens": scripted.prompt_tokens
                if scripted and scripted.prompt_tokens is not None
                else _tokens(prompt_text),
                "output_tokens": scripted.completion_tokens
                if scripted and scripted.completion_tokens is not None
                else _tokens(text),
            }
            message = {
                "id": "msg_scripted",
                "type": "message",
                "role": "assistant",
                "model": body["model"],
                "content": [{"type": "text", "text": text}],
                "stop_reason": "end_turn",
                "stop_sequence": None,
                "usage": usage,
            }
            if body.get("stream"):
                return StreamingResponse(_anthropic_sse(message), media_type="text/event-stream")
            return JSONResponse(message)

        return app
