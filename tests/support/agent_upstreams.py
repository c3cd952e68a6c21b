"""Model upstreams for the coding agents' end-to-end tests: each speaks its client's real protocol, streamed, and
drives a scripted session through the client's own tools.

One server answers all three APIs on 127.0.0.1: Anthropic's Messages (`POST /v1/messages`, server-sent
`message_start` ... `message_stop` with `tool_use` blocks built from `input_json_delta` pieces, and
`/v1/messages/count_tokens`) for Claude Code; OpenAI's Responses API (`POST /v1/responses`, `response.created` ...
`response.completed` with `function_call` items) for Codex; Chat Completions (`POST /v1/chat/completions`, chunks
with `tool_calls` deltas and the usage chunk) for OpenCode. Every event goes out as its own HTTP chunk.

The session is protocol-neutral (`Read`, `Write`, `Run`, `Say`) and each API turns a step into its client's tool
call: Claude Code's `Read`/`Write`/`Bash`, OpenCode's `read`/`write`/`bash`, Codex's `exec_command`. Which step a
request gets is read from the conversation it carries (the tool results in it), so side calls (a title, a token
count) and retries never move the script; a request that offers none of the client's tools is a side call and gets
a short text. Every request is recorded, with the step it was answered with.
"""

from __future__ import annotations

import json
import shlex
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass(frozen=True)
class Read:
    path: str  # absolute, as the agent sees it


@dataclass(frozen=True)
class Write:
    path: str
    content: str


@dataclass(frozen=True)
class Run:
    command: str


@dataclass(frozen=True)
class Say:
    text: str


Step = Read | Write | Run | Say


@dataclass
class Seen:
    """One request as the upstream received it."""

    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    step: int | None  # the script's step it was answered with; None for a side call
    received_at: float = field(default_factory=time.time)

    @property
    def api(self) -> str:
        return self.path.split("?", 1)[0]


def _tool_names(api: str, body: dict[str, Any]) -> set[str]:
    names = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict):
            continue
        if api.endswith("/chat/completions"):
            names.add(str((tool.get("function") or {}).get("name")))
        else:
            names.add(str(tool.get("name")))
    return names


def _tool_results(api: str, body: dict[str, Any]) -> list[str]:
    """The outputs of the tool calls the conversation holds, oldest first (what the client ran for the script)."""
    results: list[str] = []
    if api.endswith("/messages"):
        for message in body.get("messages") or []:
            for block in message.get("content") or [] if isinstance(message.get("content"), list) else []:
                if isinstance(block, dict) and block.get("type") == "tool_result":
                    content = block.get("content")
                    if isinstance(content, list):
                        content = "".join(str(b.get("text", "")) for b in content if isinstance(b, dict))
                    results.append(str(content))
    elif api.endswith("/responses"):
        for item in body.get("input") or []:
            if isinstance(item, dict) and item.get("type") in (
                "function_call_output",
                "custom_tool_call_output",
            ):
                output = item.get("output")
                results.append(output if isinstance(output, str) else json.dumps(output))
    else:
        for message in body.get("messages") or []:
            if message.get("role") == "tool":
                content = message.get("content")
                results.append(content if isinstance(content, str) else json.dumps(content))
    return results


# Which tool each client calls for a step, and with what arguments.
CLAUDE_TOOLS = {"Read", "Write", "Bash"}
OPENCODE_TOOLS = {"read", "write", "bash"}
CODEX_TOOLS = {"exec_command"}


def _claude_call(step: Step) -> tuple[str, dict[str, Any]]:
    if isinstance(step, Read):
        return "Read", {"file_path": step.path}
    if isinstance(step, Write):
        return "Write", {"file_path": step.path, "content": step.content}
    assert isinstance(step, Run)
    return "Bash", {"command": step.command, "description": "Run a step of the task"}


def _opencode_call(step: Step) -> tuple[str, dict[str, Any]]:
    if isinstance(step, Read):
        return "read", {"filePath": step.path}
    if isinstance(step, Write):
        return "write", {"filePath": step.path, "content": step.content}
    assert isinstance(step, Run)
    return "bash", {"command": step.command, "description": "Run a step of the task"}


def _codex_call(step: Step) -> tuple[str, dict[str, Any]]:
    if isinstance(step, Read):
        return "exec_command", {"cmd": f"cat {shlex.quote(step.path)}"}
    if isinstance(step, Write):
        script = f"cat > {shlex.quote(step.path)} <<'RLLOOP_EOF'\n{step.content}\nRLLOOP_EOF"
        return "exec_command", {"cmd": script}
    assert isinstance(step, Run)
    return "exec_command", {"cmd": step.command, "yield_time_ms": 30000}


class SessionUpstream:
    """Serve the three APIs from one script on 127.0.0.1:<free port>; `base_url` ends in /v1."""

    def __init__(
        self,
        steps: list[Step],
        *,
        api_key: str,
        models: tuple[str, ...] = ("test-model",),
        usage: tuple[int, int] = (1000, 100),
        side_usage: tuple[int, int] = (1, 1),
    ) -> None:
        self.steps = steps
        self.api_key = api_key
        self.models = models
        self.usage = usage
        self.side_usage = side_usage
        self.seen: list[Seen] = []
        self._lock = threading.Lock()
        self._counter = 0
        upstream = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *args: object) -> None:
                return

            def do_POST(self) -> None:  # noqa: N802 - http.server's naming
                upstream._serve(self)

            def do_GET(self) -> None:  # noqa: N802
                upstream._json(self, 404, {"error": {"message": "not served", "type": "not_found"}})

        self._server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="session-upstream", daemon=True
        )

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}/v1"

    def __enter__(self) -> SessionUpstream:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def main_calls(self) -> list[Seen]:
        with self._lock:
            return [s for s in self.seen if s.step is not None]

    def tool_results(self) -> list[str]:
        """The tool outputs the last main call carried: what the agent's tools printed for the script."""
        calls = self.main_calls()
        return _tool_results(calls[-1].api, calls[-1].body) if calls else []

    # -- serving ------------------------------------------------------------------------------------------

    def _next_id(self) -> int:
        with self._lock:
            self._counter += 1
            return self._counter

    def _serve(self, handler: BaseHTTPRequestHandler) -> None:
        length = int(handler.headers.get("Content-Length") or 0)
        body = json.loads(handler.rfile.read(length) or b"{}")
        api = handler.path.split("?", 1)[0]
        headers = {k.lower(): v for k, v in handler.headers.items()}
        anthropic = api.startswith("/v1/messages")
        key = (
            headers.get("x-api-key")
            if anthropic
            else headers.get("authorization", "").removeprefix("Bearer ")
        )
        if key != self.api_key:
            self._error(handler, 401, "invalid api key", anthropic)
            return
        if api == "/v1/messages/count_tokens":
            with self._lock:
                self.seen.append(Seen(handler.path, headers, body, None))
            self._json(handler, 200, {"input_tokens": len(json.dumps(body)) // 4})
            return
        if body.get("model") not in self.models:
            self._error(handler, 404, f"model {body.get('model')!r} not found", anthropic)
            return
        offered = _tool_names(api, body)
        tools = CLAUDE_TOOLS if anthropic else CODEX_TOOLS if api == "/v1/responses" else OPENCODE_TOOLS
        step: int | None = None
        if tools <= offered:
            step = len(_tool_results(api, body))
        with self._lock:
            self.seen.append(Seen(handler.path, headers, body, step))
        usage = self.usage if step is not None else self.side_usage
        action: Step = (
            Say("ok") if step is None else self.steps[step] if step < len(self.steps) else Say("done")
        )
        if anthropic:
            self._anthropic(handler, body, action, usage)
        elif api == "/v1/responses":
            self._responses(handler, body, action, usage)
        elif api == "/v1/chat/completions":
            self._chat(handler, body, action, usage)
        else:
            self._error(handler, 404, f"{api} is not served", False)

    # -- the three protocols ------------------------------------------------------------------------------

    def _anthropic(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], action: Step, usage: tuple[int, int]
    ) -> None:
        number = self._next_id()
        message: dict[str, Any] = {
            "id": f"msg_{number:06d}",
            "type": "message",
            "role": "assistant",
            "model": body["model"],
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": usage[0], "output_tokens": 1},
        }
        if isinstance(action, Say):
            block: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": action.text}]
            stop = "end_turn"
            final: dict[str, Any] = {"type": "text", "text": action.text}
        else:
            name, arguments = _claude_call(action)
            text = json.dumps(arguments)
            block = {"type": "tool_use", "id": f"toolu_{number:06d}", "name": name, "input": {}}
            deltas = [
                {"type": "input_json_delta", "partial_json": text[i : i + 40]}
                for i in range(0, len(text), 40)
            ]
            stop = "tool_use"
            final = {**block, "input": arguments}
        if not body.get("stream"):
            message.update(content=[final], stop_reason=stop)
            message["usage"] = {"input_tokens": usage[0], "output_tokens": usage[1]}
            self._json(handler, 200, message)
            return
        events: list[tuple[str, dict[str, Any]]] = [
            ("message_start", {"type": "message_start", "message": message}),
            ("content_block_start", {"type": "content_block_start", "index": 0, "content_block": block}),
            *(
                ("content_block_delta", {"type": "content_block_delta", "index": 0, "delta": d})
                for d in deltas
            ),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {
                    "type": "message_delta",
                    "delta": {"stop_reason": stop, "stop_sequence": None},
                    "usage": {"output_tokens": usage[1]},
                },
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        self._stream(handler, [f"event: {n}\ndata: {json.dumps(d)}\n\n" for n, d in events])

    def _responses(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], action: Step, usage: tuple[int, int]
    ) -> None:
        number = self._next_id()
        response: dict[str, Any] = {
            "id": f"resp_{number:06d}",
            "object": "response",
            "created_at": int(time.time()),
            "status": "in_progress",
            "model": body["model"],
            "output": [],
        }
        if isinstance(action, Say):
            item: dict[str, Any] = {
                "type": "message",
                "id": f"msg_{number:06d}",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": action.text, "annotations": []}],
            }
            pieces: list[dict[str, Any]] = [
                {
                    "type": "response.output_text.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "content_index": 0,
                    "delta": action.text,
                }
            ]
            started = {**item, "status": "in_progress", "content": []}
        else:
            name, arguments = _codex_call(action)
            text = json.dumps(arguments)
            item = {
                "type": "function_call",
                "id": f"fc_{number:06d}",
                "call_id": f"call_{number:06d}",
                "name": name,
                "arguments": text,
                "status": "completed",
            }
            pieces = [
                {
                    "type": "response.function_call_arguments.delta",
                    "item_id": item["id"],
                    "output_index": 0,
                    "delta": text[i : i + 40],
                }
                for i in range(0, len(text), 40)
            ]
            pieces.append(
                {
                    "type": "response.function_call_arguments.done",
                    "item_id": item["id"],
                    "output_index": 0,
                    "arguments": text,
                }
            )
            started = {**item, "status": "in_progress", "arguments": ""}
        done = {
            **response,
            "status": "completed",
            "output": [item],
            "usage": {
                "input_tokens": usage[0],
                "input_tokens_details": {"cached_tokens": 0},
                "output_tokens": usage[1],
                "output_tokens_details": {"reasoning_tokens": 0},
                "total_tokens": usage[0] + usage[1],
            },
        }
        events: list[dict[str, Any]] = [
            {"type": "response.created", "response": response},
            {"type": "response.output_item.added", "output_index": 0, "item": started},
            *pieces,
            {"type": "response.output_item.done", "output_index": 0, "item": item},
            {"type": "response.completed", "response": done},
        ]
        self._stream(handler, [f"event: {e['type']}\ndata: {json.dumps(e)}\n\n" for e in events])

    def _chat(
        self, handler: BaseHTTPRequestHandler, body: dict[str, Any], action: Step, usage: tuple[int, int]
    ) -> None:
        number = self._next_id()
        base = {
            "id": f"chatcmpl-{number:06d}",
            "object": "chat.completion.chunk",
            "created": int(time.time()),
            "model": body["model"],
        }

        def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
            return {**base, "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}

        if isinstance(action, Say):
            chunks = [chunk({"role": "assistant", "content": action.text}), chunk({}, "stop")]
            message: dict[str, Any] = {"role": "assistant", "content": action.text}
            finish = "stop"
        else:
            name, arguments = _opencode_call(action)
            text = json.dumps(arguments)
            call_id = f"call_{number:06d}"
            head = {
                "index": 0,
                "id": call_id,
                "type": "function",
                "function": {"name": name, "arguments": ""},
            }
            chunks = [chunk({"role": "assistant", "content": None, "tool_calls": [head]})]
            chunks += [
                chunk({"tool_calls": [{"index": 0, "function": {"arguments": text[i : i + 40]}}]})
                for i in range(0, len(text), 40)
            ]
            chunks.append(chunk({}, "tool_calls"))
            message = {
                "role": "assistant",
                "content": None,
                "tool_calls": [
                    {"id": call_id, "type": "function", "function": {"name": name, "arguments": text}}
                ],
            }
            finish = "tool_calls"
        counts = {"prompt_tokens": usage[0], "completion_tokens": usage[1], "total_tokens": sum(usage)}
        if not body.get("stream"):
            answer = {
                **base,
                "object": "chat.completion",
                "choices": [{"index": 0, "message": message, "finish_reason": finish}],
                "usage": counts,
            }
            self._json(handler, 200, answer)
            return
        options = body.get("stream_options") or {}
        if isinstance(options, dict) and options.get("include_usage"):
            chunks.append({**base, "choices": [], "usage": counts})
        self._stream(handler, [f"data: {json.dumps(c)}\n\n" for c in chunks] + ["data: [DONE]\n\n"])

    # -- the wire -----------------------------------------------------------------------------------------

    def _stream(self, handler: BaseHTTPRequestHandler, events: list[str]) -> None:
        handler.send_response(200)
        handler.send_header("Content-Type", "text/event-stream")
        handler.send_header("Cache-Control", "no-cache")
        handler.send_header("Transfer-Encoding", "chunked")
        handler.end_headers()
        for event in events:
            data = event.encode()
            handler.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            handler.wfile.flush()
        handler.wfile.write(b"0\r\n\r\n")
        handler.wfile.flush()

    def _json(self, handler: BaseHTTPRequestHandler, status: int, payload: dict[str, Any]) -> None:
        data = json.dumps(payload).encode()
        handler.send_response(status)
        handler.send_header("Content-Type", "application/json")
        handler.send_header("Content-Length", str(len(data)))
        handler.end_headers()
        handler.wfile.write(data)

    def _error(self, handler: BaseHTTPRequestHandler, status: int, message: str, anthropic: bool) -> None:
        if anthropic:
            payload: dict[str, Any] = {
                "type": "error",
                "error": {"type": "invalid_request_error", "message": message},
            }
        else:
            payload = {
                "error": {"message": message, "type": "invalid_request_error", "param": None, "code": None}
            }
        self._json(handler, status, payload)
