"""A thin, accountable wrapper over the `openai` SDK for the research loop's driver model.

Why not call the SDK directly: the loop needs (a) retries it can bound in attempts *and* wall time, with jitter and
Retry-After, (b) a single `LLMUnavailableError` line when the endpoint is dead so it can end the run with a results
row, (c) tokens and dollars per call against a `Budget`, and (d) structured output that degrades gracefully on
OpenAI-compatible servers that lack `json_schema` (json_schema -> json_object -> plain text).
"""

from __future__ import annotations

import logging
import math
import os
import random
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any, Literal

import openai
from openai import OpenAI
from pydantic import BaseModel, ConfigDict, Field, SecretStr

from agent.llm.budget import Budget
from agent.llm.errors import LLMBudgetExhaustedError, LLMError, LLMRequestError, LLMUnavailableError
from agent.llm.pricing import PriceTable
from agent.llm.retry import RETRYABLE_STATUS, RetryPolicy, parse_retry_after

logger = logging.getLogger(__name__)

OPENAI_DEFAULT_BASE_URL = "https://api.openai.com/v1"
NO_KEY = "sk-no-key-required"  # local OpenAI-compatible servers (vLLM, llama.cpp) accept any key

ResponseMode = Literal["json_schema", "json_object", "text"]
Message = dict[str, Any]


class LLMSettings(BaseModel):
    """How to reach the driver model. `from_env` reads `OPENAI_BASE_URL` and `OPENAI_API_KEY`."""

    model_config = ConfigDict(extra="forbid")

    model: str = Field(min_length=1, description="The driver model, from --driver-model.")
    base_url: str = OPENAI_DEFAULT_BASE_URL
    api_key: SecretStr | None = None
    timeout_s: float = Field(default=120.0, gt=0, description="Per-request timeout.")
    temperature: float | None = None
    max_completion_tokens: int | None = Field(default=None, gt=0)
    retry: RetryPolicy = Field(default_factory=RetryPolicy)

    @classmethod
    def from_env(cls, model: str, environ: Mapping[str, str] | None = None, **overrides: Any) -> LLMSettings:
        env = os.environ if environ is None else environ
        base_url = env.get("OPENAI_BASE_URL", "").strip() or OPENAI_DEFAULT_BASE_URL
        key = env.get("OPENAI_API_KEY", "").strip()
        values: dict[str, Any] = {
            "model": model,
            "base_url": base_url,
            "api_key": SecretStr(key) if key else None,
        }
        values.update(overrides)
        return cls(**values)


class CallRecord(BaseModel):
    """One successful call: what it cost and how hard it was to get."""

    purpose: str
    model: str
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    cost_usd: float
    attempts: int
    latency_s: float
    response_mode: ResponseMode
    finish_reason: str | None = None
    usage_estimated: bool = False  # the server sent no `usage`; tokens estimated at 4 characters each


class ToolCall(BaseModel):
    """One function call the model asked for: `arguments` is the model's JSON text, unparsed (it may be broken)."""

    id: str
    name: str
    arguments: str = ""


class ChatReply(BaseModel):
    """The assistant message of one call, with its accounting."""

    content: str | None
    finish_reason: str | None
    refusal: str | None = None
    tool_calls: list[ToolCall] = Field(default_factory=list)
    record: CallRecord

    def as_message(self) -> Message:
        """The reply as the assistant turn to send back, tool calls included (OpenAI pairs them with tool turns)."""
        message: Message = {"role": "assistant", "content": self.content}
        if self.tool_calls:
            message["tool_calls"] = [
                {"id": c.id, "type": "function", "function": {"name": c.name, "arguments": c.arguments}}
                for c in self.tool_calls
            ]
        return message


def _one_line(text: str, limit: int = 300) -> str:
    line = " ".join(str(text).split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _status_detail(exc: openai.APIStatusError) -> str:
    body = exc.body
    message = body.get("message") if isinstance(body, dict) else None
    return f"HTTP {exc.status_code}: {_one_line(str(message or exc.message), 200)}"


def _estimate_tokens(text: str) -> int:
    return math.ceil(len(text) / 4)


class LLMClient:
    """Chat calls with bounded retries, per-call accounting and a shared budget."""

    def __init__(
        self,
        settings: LLMSettings,
        *,
        prices: PriceTable | None = None,
        budget: Budget | None = None,
        sleep: Callable[[float], None] = time.sleep,
        seed: int | None = None,
    ) -> None:
        self.settings = settings
        self.prices = prices if prices is not None else PriceTable.from_env()
        self.budget = budget if budget is not None else Budget()
        self.calls: list[CallRecord] = []
        self.retries = 0  # failed attempts that were tried again, over the client's life
        self._sleep = sleep
        self._rng = random.Random(seed)
        self._structured_mode: ResponseMode = "json_schema"  # degrades once when the server lacks it
        self.tools_supported: bool | None = None  # None until a request with tools got an answer or a refusal
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        if api_key is None:
            if settings.base_url.rstrip("/") == OPENAI_DEFAULT_BASE_URL:
                raise LLMUnavailableError(
                    "OPENAI_API_KEY is not set: export it, or point OPENAI_BASE_URL at an OpenAI-compatible server"
                )
            api_key = NO_KEY
        self._openai = OpenAI(
            base_url=settings.base_url, api_key=api_key, timeout=settings.timeout_s, max_retries=0
        )

    @property
    def model(self) -> str:
        return self.settings.model

    @property
    def structured_mode(self) -> ResponseMode:
        """How structured output is requested now (it degrades once if the server rejects json_schema)."""
        return self._structured_mode

    @property
    def total_cost_usd(self) -> float:
        return sum(call.cost_usd for call in self.calls)

    @property
    def total_tokens(self) -> int:
        return sum(call.total_tokens for call in self.calls)

    def close(self) -> None:
        self._openai.close()

    def __enter__(self) -> LLMClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def list_models(self) -> list[str]:
        """Model ids the endpoint serves (`GET /models`); a preflight for `--driver-model`."""
        return [
            model.id
            for model in self._with_retries(lambda: list(self._openai.models.list()), "list models")[0]
        ]

    def chat(
        self, messages: Sequence[Message], *, purpose: str = "chat", model: str | None = None
    ) -> ChatReply:
        """A plain chat call (`model` overrides the settings' model for this call)."""
        return self._chat(messages, None, "text", purpose, model)

    def chat_json(
        self,
        messages: Sequence[Message],
        *,
        schema: dict[str, Any],
        schema_name: str,
        purpose: str = "chat_json",
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
    ) -> ChatReply:
        """Ask for one JSON object: json_schema output if the server has it, else JSON mode, else plain text.

        The schema is sent non-strict (OpenAI's strict mode forbids free-form objects such as hyperparameters), so
        the caller validates the content itself and feeds errors back. With `tools` the model may call them instead
        (the reply's `tool_calls`); a server that refuses tools on its first such request is asked again without.
        """
        while True:
            mode = self._structured_mode
            response_format: dict[str, Any] | None
            if mode == "json_schema":
                response_format = {
                    "type": "json_schema",
                    "json_schema": {"name": schema_name, "schema": schema, "strict": False},
                }
            elif mode == "json_object":
                response_format = {"type": "json_object"}
            else:
                response_format = None
            offered = tools if tools and self.tools_supported is not False else None
            try:
                reply = self._chat(
                    messages, response_format, mode, purpose, model, offered, tool_choice if offered else None
                )
                if offered:
                    self.tools_supported = True
                return reply
            except LLMRequestError as exc:
                if offered and self.tools_supported is None:
                    self.tools_supported = False
                    logger.info("LLM endpoint rejected tool calling (%s); asking without tools", exc)
                    continue
                if mode == "text":
                    raise
                self._structured_mode = "json_object" if mode == "json_schema" else "text"
                logger.info(
                    "LLM endpoint rejected %s output (%s); using %s", mode, exc, self._structured_mode
                )

    def _chat(
        self,
        messages: Sequence[Message],
        response_format: dict[str, Any] | None,
        mode: ResponseMode,
        purpose: str,
        model: str | None = None,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
    ) -> ChatReply:
        model = model or self.settings.model
        reason = self.budget.exhausted()
        if reason is not None:
            raise LLMBudgetExhaustedError(f"LLM budget exhausted: {reason}; no further driver-model calls")
        kwargs: dict[str, Any] = {"model": model, "messages": list(messages)}
        if response_format is not None:
            kwargs["response_format"] = response_format
        if tools:
            kwargs["tools"] = tools
            if tool_choice is not None:
                kwargs["tool_choice"] = tool_choice
        if self.settings.temperature is not None:
            kwargs["temperature"] = self.settings.temperature
        if self.settings.max_completion_tokens is not None:
            kwargs["max_completion_tokens"] = self.settings.max_completion_tokens
        started = time.monotonic()
        completion, attempts = self._with_retries(
            lambda: self._openai.chat.completions.create(**kwargs), purpose
        )
        latency = time.monotonic() - started
        if not completion.choices:
            raise LLMRequestError(f"LLM endpoint {self.settings.base_url} returned no choices for {purpose}")
        choice = completion.choices[0]
        content = choice.message.content
        calls = [
            ToolCall(id=c.id, name=c.function.name, arguments=c.function.arguments or "")
            for c in choice.message.tool_calls or []
            if getattr(c, "function", None) is not None
        ]
        usage = completion.usage
        estimated = usage is None
        if usage is not None:
            prompt_tokens, completion_tokens = usage.prompt_tokens, usage.completion_tokens
        else:
            prompt_tokens = sum(_estimate_tokens(str(m.get("content") or "")) for m in messages)
            completion_tokens = _estimate_tokens((content or "") + "".join(c.arguments for c in calls))
        cost = self.prices.cost(model, prompt_tokens, completion_tokens)
        record = CallRecord(
            purpose=purpose,
            model=completion.model or model,
            prompt_tokens=prompt_tokens,
            completion_tokens=completion_tokens,
            total_tokens=prompt_tokens + completion_tokens,
            cost_usd=cost,
            attempts=attempts,
            latency_s=latency,
            response_mode=mode,
            finish_reason=choice.finish_reason,
            usage_estimated=estimated,
        )
        self.calls.append(record)
        self.budget.record_llm(prompt_tokens, completion_tokens, cost)
        return ChatReply(
            content=content,
            finish_reason=choice.finish_reason,
            refusal=getattr(choice.message, "refusal", None),
            tool_calls=calls,
            record=record,
        )

    def _with_retries(self, call: Callable[[], Any], purpose: str) -> tuple[Any, int]:
        """Run `call`, retrying transient failures; map every failure to one actionable `LLMError` line."""
        policy = self.settings.retry
        started = time.monotonic()
        attempt = 0
        while True:
            attempt += 1
            retry_after: float | None = None
            try:
                return call(), attempt
            except openai.APITimeoutError:
                last = f"timed out after {self.settings.timeout_s:g}s"
            except openai.APIConnectionError as exc:
                last = f"connection failed: {_one_line(str(exc.__cause__ or exc), 160)}"
            except openai.APIStatusError as exc:
                self._raise_if_fatal(exc)
                last = _status_detail(exc)
                headers = exc.response.headers
                ms = parse_retry_after(headers.get("retry-after-ms"))
                retry_after = ms / 1000 if ms is not None else parse_retry_after(headers.get("retry-after"))
            except openai.OpenAIError as exc:
                raise LLMError(f"LLM call ({purpose}) failed: {_one_line(str(exc))}") from None
            elapsed = time.monotonic() - started
            delay = policy.backoff(attempt, self._rng, retry_after)
            if attempt >= policy.max_attempts or elapsed + delay > policy.max_total_s:
                if retry_after is not None and attempt < policy.max_attempts:
                    last += (
                        f"; the server asks to wait {retry_after:g}s, past max_total_s={policy.max_total_s:g}"
                    )
                raise LLMUnavailableError(self._give_up_message(last, attempt, elapsed)) from None
            logger.warning(
                "LLM call (%s) attempt %d failed (%s); retrying in %.2fs", purpose, attempt, last, delay
            )
            self.retries += 1
            self._sleep(delay)

    def _give_up_message(self, last: str, attempts: int, elapsed: float) -> str:
        url = self.settings.base_url
        tries = f"{attempts} attempt" + ("" if attempts == 1 else "s")
        if last.startswith("connection failed"):
            return (
                f"cannot reach the LLM endpoint {url} ({last}; {tries} over {elapsed:.1f}s): "
                "start the server or set OPENAI_BASE_URL to one that is running"
            )
        return (
            f"the LLM endpoint {url} kept failing ({tries} over {elapsed:.1f}s, last: {last}): "
            "retry later, or raise the retry policy's max_attempts / max_total_s"
        )

    def _raise_if_fatal(self, exc: openai.APIStatusError) -> None:
        """Errors no retry can fix: raise the one line that says what to do instead."""
        url, model, detail = self.settings.base_url, self.settings.model, _status_detail(exc)
        status = exc.status_code
        if status in (401, 403):
            raise LLMUnavailableError(
                f"the LLM endpoint {url} rejected the API key ({detail}): set OPENAI_API_KEY to a valid key"
            ) from None
        if status == 404:
            raise LLMUnavailableError(
                f"model {model!r} not found at {url} ({detail}): check --driver-model "
                "(GET /models lists what is served) and that OPENAI_BASE_URL ends in /v1"
            ) from None
        if status == 429 and exc.code == "insufficient_quota":
            raise LLMUnavailableError(
                f"the LLM account behind {url} is out of quota ({detail}): add credit or use another key"
            ) from None
        if status not in RETRYABLE_STATUS and status < 500:
            raise LLMRequestError(f"the LLM endpoint {url} refused the request ({detail})") from None
