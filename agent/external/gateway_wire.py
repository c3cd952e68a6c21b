"""The OpenAI and Anthropic APIs as the model gateway reads and answers them: the endpoints it serves, where each
bounds a call's output, the headers it drops and keeps, the error shape each client surfaces, and how usage and text
are read from an answer or a server-sent event stream (`StreamMeter`)."""

from __future__ import annotations

import json
from typing import Any

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
OUTPUT_FIELDS = {
    "/chat/completions": ("max_completion_tokens", "max_tokens"),
    "/completions": ("max_tokens",),
    "/responses": ("max_output_tokens",),
    "/messages": ("max_tokens",),
}
OUTPUT_FIELD_SET = {
    "/chat/completions": "max_completion_tokens",
    "/completions": "max_tokens",
    "/responses": "max_output_tokens",
    "/messages": "max_tokens",
}
# The API's own output bound when a request names none (legacy completions stop at 16 tokens): nothing to add.
OUTPUT_DEFAULTS = {"/completions": 16}
# A spent cap: 402 Payment Required, which the openai, Anthropic and ai-sdk clients never retry.
BUDGET_STATUS = 402
# Request headers never forwarded: hop-by-hop ones, those the gateway sets itself, and the agent's (fake) key.
DROPPED_HEADERS = {
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
KEPT_ANSWER_HEADERS = ("content-type", "retry-after", "x-request-id", "request-id")


def error_body(message: str, kind: str, code: str | None = None, anthropic: bool = False) -> bytes:
    """OpenAI's error shape (which the openai and LiteLLM SDKs, Codex and OpenCode surface as the message), or
    Anthropic's for its Messages paths (Claude Code)."""
    if anthropic:
        return json.dumps({"type": "error", "error": {"type": kind, "message": message}}).encode()
    return json.dumps(
        {"error": {"message": message, "type": kind, "param": None, "code": code or kind}}
    ).encode()


def clip(value: Any, limit: int) -> str:
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, default=str)
    return text if len(text) <= limit else text[:limit] + f"... [{len(text) - limit} more characters]"


def usage_of(data: Any) -> tuple[int, int] | None:
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


def delta_text(data: Any) -> str:
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


def estimate_tokens(size: int) -> int:
    """Tokens in `size` bytes of JSON or text, counted high (about 4 bytes a token for English; less for JSON)."""
    return (size + 3) // 4


class StreamMeter:
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
        usage = usage_of(data)
        if usage is not None:
            prompt, completion = usage
            self.prompt = prompt or self.prompt  # Anthropic's message_delta repeats no input count
            self.completion = completion or self.completion
        if self._size < self.clip:
            text = delta_text(data)
            self.text.append(text)
            self._size += len(text)


def bound_output(sub: str, data: dict[str, Any], default: int) -> tuple[int, bool]:
    """The most output tokens the call may produce, and whether the gateway had to set that bound itself (the
    request named none: then `default`, written into `data`). `n` choices multiply it."""
    bound = None
    for name in OUTPUT_FIELDS.get(sub, ()):
        value = data.get(name)
        if isinstance(value, int) and not isinstance(value, bool) and value > 0:
            bound = value
            break
    if bound is None:
        bound = OUTPUT_DEFAULTS.get(sub)
    added = bound is None
    if bound is None:
        bound = default
        data[OUTPUT_FIELD_SET[sub]] = bound
    choices = data.get("n")
    if isinstance(choices, int) and not isinstance(choices, bool) and choices > 1:
        bound *= choices
    return bound, added
