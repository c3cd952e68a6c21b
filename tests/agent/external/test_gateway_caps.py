"""The gateway under what real coding agents send: calls that overlap against the token and dollar caps, and the
three APIs (Anthropic Messages with tool use and token counts, the Responses API, Chat Completions) streamed through
it from a test upstream that speaks each one; all over real HTTP."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.external.gateway import ModelGateway
from agent.external.gateway_setup import GatewayConfig
from agent.external.relay import TokenRelay
from agent.llm.budget import Budget, BudgetLimits
from agent.llm.pricing import ModelPrice, PriceTable
from tests.support.agent_upstreams import Run, Say, SessionUpstream
from tests.support.openai_server import ScriptedOpenAIServer, reply

REAL_KEY = "sk-real-key-caps-0123456789"
KEY_ENV = "RLLOOP_TEST_CAPS_KEY"
PRICES = PriceTable(prices={"test-model": ModelPrice(input_per_1m=1000.0, output_per_1m=2000.0)})


def _gateway(tmp_path: Path, base_url: str, **settings: object) -> tuple[ModelGateway, TokenRelay]:
    config = GatewayConfig(base_url=base_url, key_env=KEY_ENV, **settings)  # type: ignore[arg-type]
    limits = BudgetLimits(max_tokens=config.max_tokens, max_usd=config.max_usd)
    gateway = ModelGateway(
        config,
        budget=Budget(limits, ledger=tmp_path / "budget.json"),
        transcript=tmp_path / "agent-llm.jsonl",
        prices=PRICES,
        environ={KEY_ENV: REAL_KEY},
    )
    return gateway, TokenRelay("http://127.0.0.1:9", "grader-token", gateway=gateway)


def _lines(path: Path, count: int) -> list[dict[str, object]]:
    """The transcript once it holds `count` whole lines (a call is written just after its last byte went out)."""
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        text = path.read_text() if path.exists() else ""
        if text.count("\n") >= count and text.endswith("\n"):
            break
        time.sleep(0.01)
    return [json.loads(line) for line in text.splitlines()]


@pytest.fixture
def scripted() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=["test-model"], api_key=REAL_KEY) as server:
        yield server


@pytest.mark.parametrize(
    ("settings", "one_call"),
    [({"max_tokens": 1000}, 300), ({"max_usd": 1.0}, 0.5)],
    ids=["token-cap", "dollar-cap"],
)
def test_calls_fired_at_once_overshoot_a_cap_by_one_call_at_most(
    tmp_path: Path, scripted: ScriptedOpenAIServer, settings: dict[str, float], one_call: float
) -> None:
    """20 calls at once, each answered 0.5 s late with 300 tokens ($0.50 at the test prices). Checked before and
    charged after, all 20 were forwarded (6,000 tokens against a cap of 1,000, measured 2026-12-04); reserving each
    call's bound (its prompt bytes + max_tokens) before it goes and holding the calls that could cross the cap
    while others are in flight keeps what is spent within one call of the cap, and refuses the rest (402)."""
    scripted.enqueue(*(reply("ok", prompt_tokens=100, completion_tokens=200, delay_s=0.5) for _ in range(20)))
    gateway, relay = _gateway(tmp_path, scripted.base_url, **settings)
    start = threading.Barrier(20)
    statuses: list[int] = []

    def fire() -> None:
        start.wait()
        answer = httpx.post(
            f"{relay.url}/v1/chat/completions",
            json={"model": "test-model", "messages": [{"role": "user", "content": "go"}], "max_tokens": 250},
            headers={"Authorization": f"Bearer {gateway.placeholder}"},
            timeout=60,
        )
        statuses.append(answer.status_code)

    try:
        threads = [threading.Thread(target=fire) for _ in range(20)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(timeout=60)
        spent = gateway.budget.spent()
        forwarded = len(scripted.chat_requests())
        assert sorted(set(statuses)) == [200, 402] and len(statuses) == 20
        assert statuses.count(200) == forwarded == spent.llm_calls < 20
        if "max_tokens" in settings:
            assert settings["max_tokens"] <= spent.tokens <= settings["max_tokens"] + one_call
        else:
            assert settings["max_usd"] <= spent.usd <= settings["max_usd"] + one_call + 1e-9
        lines = _lines(tmp_path / "agent-llm.jsonl", 20)
        assert any(float(str(line["held_ms"])) > 100 for line in lines)  # some waited for calls in flight
        refused = [line for line in lines if line["status"] == 402]
        assert len(refused) == 20 - forwarded and all("cap" in str(line["refused"]) for line in refused)
        assert gateway.stop_reason is not None
    finally:
        relay.close()
        gateway.close()


def test_a_request_without_an_output_bound_gets_one_only_under_a_cap(tmp_path: Path) -> None:
    """Codex names no max_output_tokens: under a cap the gateway adds its bound (so the call's cost is known
    before it goes) and reserves it; without a cap the request passes as it came."""
    with SessionUpstream([Say("hi")], api_key=REAL_KEY) as upstream:
        for folder, settings in (("capped", {"max_tokens": 10_000_000}), ("free", {})):
            (tmp_path / folder).mkdir()
            gateway, relay = _gateway(tmp_path / folder, upstream.base_url, **settings)
            try:
                with httpx.stream(
                    "POST",
                    f"{relay.url}/v1/responses",
                    json={"model": "test-model", "input": "hello", "stream": True},
                    headers={"Authorization": f"Bearer {gateway.placeholder}"},
                    timeout=30,
                ) as answer:
                    events = [line for line in answer.iter_lines() if line.startswith("event:")]
                assert events[0] == "event: response.created" and events[-1] == "event: response.completed"
                (line,) = _lines(tmp_path / folder / "agent-llm.jsonl", 1)
                assert (line["prompt_tokens"], line["completion_tokens"]) == (1, 1)  # from response.completed
                assert line["response"] == "ok"
            finally:
                relay.close()
                gateway.close()
        capped, free = upstream.seen
        assert capped.body["max_output_tokens"] == 32_000 and "max_output_tokens" not in free.body
        assert capped.headers["authorization"] == f"Bearer {REAL_KEY}"


def test_anthropic_tool_use_streams_through_and_token_counts_are_free(tmp_path: Path) -> None:
    """Claude Code's wire format: `?beta=true`, its beta and version headers, a streamed tool_use block built from
    input_json_delta pieces, cached prompt tokens, and count_tokens calls that cost nothing and still go past a spent
    cap; a refusal comes back in Anthropic's error shape."""
    with SessionUpstream([Run("python code/train.py")], api_key=REAL_KEY, usage=(400, 50)) as upstream:
        gateway, relay = _gateway(tmp_path, upstream.base_url, max_tokens=400)
        headers = {
            "x-api-key": gateway.placeholder,
            "anthropic-version": "2023-06-01",
            "anthropic-beta": "claude-code-20250219,interleaved-thinking-2025-05-14",
            "x-app": "cli",
        }
        tools = [{"name": n, "input_schema": {"type": "object"}} for n in ("Read", "Write", "Bash")]
        body = {
            "model": "test-model",
            "max_tokens": 32000,
            "stream": True,
            "tools": tools,
            "messages": [{"role": "user", "content": "train"}],
        }
        try:
            with httpx.stream(
                "POST", f"{relay.url}/v1/messages?beta=true", json=body, headers=headers, timeout=30
            ) as answer:
                data = [json.loads(x[5:]) for x in answer.iter_lines() if x.startswith("data:")]
            partial = "".join(d["delta"]["partial_json"] for d in data if d["type"] == "content_block_delta")
            assert data[1]["content_block"]["name"] == "Bash"
            assert json.loads(partial)["command"] == "python code/train.py"
            assert data[-2]["delta"]["stop_reason"] == "tool_use"
            count = httpx.post(
                f"{relay.url}/v1/messages/count_tokens?beta=true",
                json={"model": "test-model", "messages": body["messages"]},
                headers=headers,
                timeout=30,
            )
            assert count.status_code == 200 and count.json()["input_tokens"] > 0  # past the spent cap: free
            refused = httpx.post(f"{relay.url}/v1/messages", json=body, headers=headers, timeout=30)
            assert refused.status_code == 402 and refused.headers["x-should-retry"] == "false"
            error = refused.json()
            assert error["type"] == "error" and error["error"]["type"] == "budget_exceeded"
            assert "token cap of 400 reached" in error["error"]["message"]
        finally:
            relay.close()
            gateway.close()
        first, counted = upstream.seen
        assert first.path == "/v1/messages?beta=true" and first.headers["x-api-key"] == REAL_KEY
        assert first.headers["anthropic-beta"].startswith("claude-code-20250219")
        assert counted.api == "/v1/messages/count_tokens"
        lines = _lines(tmp_path / "agent-llm.jsonl", 3)
        assert [line["status"] for line in lines] == [200, 200, 402]
        assert (lines[0]["prompt_tokens"], lines[0]["completion_tokens"]) == (400, 50)
        assert (lines[1]["prompt_tokens"], lines[1]["completion_tokens"]) == (0, 0)
        assert gateway.budget.spent().llm_calls == 1  # the count was recorded, never charged


def test_anthropic_cached_prompt_tokens_count_as_prompt_tokens() -> None:
    from agent.external.gateway_wire import usage_of

    usage = {
        "input_tokens": 12,
        "cache_creation_input_tokens": 3000,
        "cache_read_input_tokens": 40000,
        "output_tokens": 7,
    }
    assert usage_of({"message": {"usage": usage}}) == (43012, 7)  # Anthropic's message_start
    assert usage_of({"usage": {"prompt_tokens": 10, "completion_tokens": 2}}) == (10, 2)  # OpenAI's
