"""The model gateway: an external agent's LLM calls reach the upstream through the relay's one address, with the real
key added on the host, metered against the run's caps and recorded; all over real HTTP, the real `openai` SDK in
front and the project's OpenAI-protocol test server behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx
import openai
import pytest

from agent.external.agent_request import INSIDE_URL, launcher
from agent.external.gateway import ModelGateway
from agent.external.gateway_setup import PLACEHOLDER_PREFIX, GatewayConfig, GatewayError, agent_env
from agent.external.relay import TokenRelay
from agent.llm.budget import Budget, BudgetLimits
from agent.llm.pricing import ModelPrice, PriceTable
from agent.results.rows import result_row
from agent.run.config import RunConfig
from agent.run.workspace import RunPaths
from tests.support.openai_server import ScriptedOpenAIServer, reply

REAL_KEY = "sk-real-key-0123456789abcdef"
KEY_ENV = "RLLOOP_TEST_UPSTREAM_KEY"
PRICES = PriceTable(prices={"test-model": ModelPrice(input_per_1m=1000.0, output_per_1m=2000.0)})


class Rig:
    """Upstream test server <- gateway (in a token relay) <- the agent's SDK."""

    def __init__(self, tmp_path: Path, **settings: object) -> None:
        self.upstream = ScriptedOpenAIServer(models=["test-model", "other-model"], api_key=REAL_KEY).start()
        self.transcript = tmp_path / "run" / "agent-llm.jsonl"
        self.ledger = tmp_path / "run" / "budget.json"
        config = GatewayConfig(base_url=self.upstream.base_url, key_env=KEY_ENV, **settings)  # type: ignore[arg-type]
        limits = BudgetLimits(max_tokens=config.max_tokens, max_usd=config.max_usd)
        self.gateway = ModelGateway(
            config,
            budget=Budget(limits, ledger=self.ledger),
            transcript=self.transcript,
            prices=PRICES,
            environ={KEY_ENV: REAL_KEY},
        )
        # the grader side is never reached by /v1 requests: a closed port proves it
        self.relay = TokenRelay("http://127.0.0.1:9", "grader-token", gateway=self.gateway)
        self.client = openai.OpenAI(base_url=f"{self.relay.url}/v1", api_key=self.gateway.placeholder)

    def lines(self, at_least: int = 1) -> list[dict[str, object]]:
        """The transcript; a streamed call is written just after its last byte went out, so wait for it a little."""
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            text = self.transcript.read_text() if self.transcript.exists() else ""
            if len(text.splitlines()) >= at_least:
                break
            time.sleep(0.01)
        return [json.loads(line) for line in text.splitlines()]

    def close(self) -> None:
        self.relay.close()
        self.gateway.close()
        self.upstream.stop()


@pytest.fixture
def rig(tmp_path: Path) -> Iterator[Rig]:
    made = Rig(tmp_path)
    yield made
    made.close()


def _rig(tmp_path: Path, **settings: object) -> Rig:
    return Rig(tmp_path, **settings)


def test_placeholder_key_is_replaced_and_the_real_key_never_comes_back(rig: Rig) -> None:
    assert rig.gateway.placeholder.startswith(PLACEHOLDER_PREFIX) and REAL_KEY not in rig.gateway.placeholder
    rig.upstream.enqueue(reply("train with lr 1e-4", prompt_tokens=11, completion_tokens=7))
    answer = rig.client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "what next?"}]
    )
    assert answer.choices[0].message.content == "train with lr 1e-4"
    (sent,) = rig.upstream.chat_requests()
    assert sent.headers["authorization"] == f"Bearer {REAL_KEY}"  # the gateway added the real key
    assert rig.gateway.placeholder not in json.dumps(sent.headers)
    assert REAL_KEY not in answer.model_dump_json()
    (line,) = rig.lines()
    assert line["status"] == 200 and line["model"] == "test-model" and line["path"] == "/v1/chat/completions"
    assert line["prompt_tokens"] == 11 and line["completion_tokens"] == 7
    assert line["cost_usd"] == pytest.approx((11 * 1000 + 7 * 2000) / 1e6)
    assert "what next?" in str(line["request"]) and "lr 1e-4" in str(line["response"])
    assert float(str(line["latency_ms"])) > 0
    spent = rig.gateway.budget.spent()
    assert (spent.llm_calls, spent.tokens) == (1, 18)
    assert json.loads(rig.ledger.read_text())["tokens"] == 18  # written through, for the results row
    # another key (the real one included: the agent never has it) is refused before the upstream sees it
    wrong = openai.OpenAI(base_url=f"{rig.relay.url}/v1", api_key="sk-guessed", max_retries=0)
    with pytest.raises(openai.AuthenticationError, match="OPENAI_API_KEY"):
        wrong.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "x"}])
    assert len(rig.upstream.chat_requests()) == 1
    assert REAL_KEY not in rig.transcript.read_text()


def test_streamed_completion_passes_through_and_is_metered(rig: Rig) -> None:
    text = "copy the base model, then run one SFT step on train.jsonl"
    rig.upstream.enqueue(reply(text, prompt_tokens=40, completion_tokens=13))
    stream = rig.client.chat.completions.create(
        model="test-model", messages=[{"role": "user", "content": "plan?"}], stream=True
    )
    chunks = list(stream)
    assert len(chunks) > 3  # passed through as events, not one blob
    assert "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) == text
    (sent,) = rig.upstream.chat_requests()
    assert sent.body["stream_options"] == {"include_usage": True}  # asked for, so the stream can be counted
    (line,) = rig.lines()
    assert line["stream"] is True and line["status"] == 200
    assert (line["prompt_tokens"], line["completion_tokens"]) == (40, 13)
    assert line["response"] == text
    assert rig.gateway.budget.spent().tokens == 53


def test_token_cap_refuses_the_next_call_with_a_readable_402(tmp_path: Path) -> None:
    rig = _rig(tmp_path, max_tokens=20)
    try:
        rig.upstream.enqueue(reply("ok", prompt_tokens=15, completion_tokens=10), reply("never sent"))
        rig.client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "a"}])
        with pytest.raises(openai.APIStatusError) as raised:  # 402: no client retries it
            rig.client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "b"}]
            )
        assert raised.value.status_code == 402
        error = raised.value.body
        assert isinstance(error, dict) and error["type"] == "budget_exceeded"
        assert "token cap of 20 reached" in error["message"] and "25 tokens used" in error["message"]
        assert len(rig.upstream.chat_requests()) == 1  # refused before forwarding
        assert rig.gateway.stop_reason is not None and "token cap of 20" in rig.gateway.stop_reason
        lines = rig.lines(2)
        assert [line["status"] for line in lines] == [200, 402]
        assert "token cap" in str(lines[1]["refused"])
    finally:
        rig.close()


def test_anthropic_messages_get_the_real_key_as_x_api_key_and_are_metered(rig: Rig) -> None:
    """Anthropic's wire format as its SDK sends it (x-api-key, anthropic-version; ANTHROPIC_BASE_URL + /v1/messages),
    plain and streamed; the usage is Anthropic's (input_tokens, output_tokens; split over a stream's events)."""
    rig.upstream.enqueue(
        reply("plain answer", prompt_tokens=9, completion_tokens=4),
        reply("a streamed answer in pieces", prompt_tokens=21, completion_tokens=6),
    )
    headers = {"x-api-key": rig.gateway.placeholder, "anthropic-version": "2023-06-01"}
    body = {"model": "test-model", "max_tokens": 64, "messages": [{"role": "user", "content": "hi"}]}
    plain = httpx.post(f"{rig.relay.url}/v1/messages", json=body, headers=headers, timeout=30)
    assert plain.status_code == 200 and plain.json()["content"][0]["text"] == "plain answer"
    with httpx.stream(
        "POST", f"{rig.relay.url}/v1/messages", json={**body, "stream": True}, headers=headers, timeout=30
    ) as streamed:
        events = [line for line in streamed.iter_lines() if line.startswith("event:")]
    assert events[0] == "event: message_start" and events[-1] == "event: message_stop"
    sent = [r for r in rig.upstream.requests if r.path == "/v1/messages"]
    assert [r.headers["x-api-key"] for r in sent] == [REAL_KEY, REAL_KEY]
    assert all(
        "authorization" not in r.headers and r.headers["anthropic-version"] == "2023-06-01" for r in sent
    )
    lines = rig.lines(2)
    assert [(line["prompt_tokens"], line["completion_tokens"]) for line in lines] == [(9, 4), (21, 6)]
    assert lines[1]["response"] == "a streamed answer in pieces"
    assert rig.gateway.budget.spent().tokens == 40


def test_dollar_cap_refuses_too(tmp_path: Path) -> None:
    rig = _rig(tmp_path, max_usd=0.01)
    try:
        rig.upstream.enqueue(reply("ok", prompt_tokens=10, completion_tokens=10))  # $0.03 at the test prices
        rig.client.chat.completions.create(model="test-model", messages=[{"role": "user", "content": "a"}])
        with pytest.raises(openai.APIStatusError, match=r"402 - .*dollar cap of \$0.0100 reached"):
            rig.client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "b"}]
            )
    finally:
        rig.close()


def test_models_outside_the_allowlist_are_refused_and_unlisted(tmp_path: Path) -> None:
    rig = _rig(tmp_path, models=("test-model",))
    try:
        with pytest.raises(openai.PermissionDeniedError, match="use one of: test-model"):
            rig.client.chat.completions.create(
                model="other-model", messages=[{"role": "user", "content": "hi"}]
            )
        assert rig.upstream.chat_requests() == []
        assert [m.id for m in rig.client.models.list()] == ["test-model"]  # the upstream lists two
        assert [line["status"] for line in rig.lines(2)] == [403, 200]
    finally:
        rig.close()


def test_a_request_over_the_size_cap_gets_413(tmp_path: Path) -> None:
    rig = _rig(tmp_path, max_request_bytes=2048)
    try:
        with pytest.raises(openai.APIStatusError) as raised:
            rig.client.chat.completions.create(
                model="test-model", messages=[{"role": "user", "content": "x" * 5000}]
            )
        assert raised.value.status_code == 413 and "cap of 2048 bytes" in str(raised.value)
        assert rig.upstream.chat_requests() == []
        assert rig.lines()[0]["status"] == 413
    finally:
        rig.close()


def test_other_paths_still_go_to_the_grader_and_unknown_model_paths_are_named(rig: Rig) -> None:
    refused = httpx.post(f"{rig.relay.url}/finalize", timeout=10)
    assert refused.status_code == 403  # the grader relay's rules are unchanged
    unknown = httpx.post(
        f"{rig.relay.url}/v1/embeddings",
        json={"model": "test-model", "input": "x"},
        headers={"Authorization": f"Bearer {rig.gateway.placeholder}"},
        timeout=10,
    )
    assert unknown.status_code == 404 and "/v1/chat/completions" in unknown.json()["error"]["message"]


def test_a_missing_key_variable_fails_before_anything_starts(tmp_path: Path) -> None:
    config = GatewayConfig(base_url="http://127.0.0.1:9/v1", key_env="RLLOOP_TEST_UNSET_KEY")
    with pytest.raises(GatewayError, match="RLLOOP_TEST_UNSET_KEY is not set"):
        ModelGateway(config, budget=Budget(), transcript=tmp_path / "t.jsonl", environ={})


def test_run_config_takes_the_variables_name_never_a_key(tmp_path: Path) -> None:
    config = RunConfig(
        home=tmp_path,
        agent_llm_base_url="http://127.0.0.1:9/v1",
        agent_llm_key_env="OPENAI_API_KEY",
        agent_llm_models=" a, b ,",
        llm_max_tokens=500,
    )
    settings = GatewayConfig.from_run(config)
    assert settings is not None and settings.models == ("a", "b") and settings.max_tokens == 500
    assert GatewayConfig.from_run(RunConfig(home=tmp_path)) is None
    with pytest.raises(ValueError, match="name of the host variable"):
        RunConfig(home=tmp_path, agent_llm_key_env="sk-abc-123")
    from agent.service.schemas import RunRequest

    assert {"agent_llm_base_url", "agent_llm_key_env", "agent_llm_models"} <= set(RunRequest.model_fields)


def test_the_launcher_points_every_ecosystems_variables_at_the_relay(tmp_path: Path) -> None:
    """The variables as the agent's shell sees them: URLs from the address the sandbox set, the placeholder key."""
    inside = agent_env("rlloop-placeholder-abc", INSIDE_URL, ["m1", "m2"])
    urls = {k: v for k, v in inside.items() if INSIDE_URL in v}
    script = tmp_path / "show.sh"
    script.write_text("env\n")
    env = {
        "PATH": os.environ["PATH"],
        "RLLOOP_GRADER_URL": "http://172.30.0.1:4321",
        **{k: v for k, v in inside.items() if k not in urls},
    }
    out = subprocess.run(
        ["bash", "-c", launcher(urls), str(script)], env=env, capture_output=True, text=True, check=True
    ).stdout
    seen = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
    assert seen["OPENAI_BASE_URL"] == seen["OPENAI_API_BASE"] == "http://172.30.0.1:4321/v1"
    assert seen["LITELLM_API_BASE"] == seen["LITELLM_PROXY_API_BASE"] == "http://172.30.0.1:4321/v1"
    assert seen["ANTHROPIC_BASE_URL"] == "http://172.30.0.1:4321"
    assert seen["GRADING_SERVER_URL"] == "http://172.30.0.1:4321"
    assert (
        seen["OPENAI_API_KEY"]
        == seen["ANTHROPIC_API_KEY"]
        == seen["LITELLM_API_KEY"]
        == "rlloop-placeholder-abc"
    )
    assert seen["OPENAI_MODEL"] == "m1" and seen["LLM_MODELS"] == "m1,m2"


LITELLM_STYLE_AGENT = textwrap.dedent(
    """
    # an agent written for LiteLLM-style variables: OPENAI_API_BASE and LITELLM_API_KEY, no SDK defaults
    import json, os, urllib.request
    request = urllib.request.Request(
        os.environ["OPENAI_API_BASE"] + "/chat/completions",
        data=json.dumps({"model": os.environ["OPENAI_MODEL"],
                         "messages": [{"role": "user", "content": "hi"}]}).encode(),
        headers={"Authorization": "Bearer " + os.environ["LITELLM_API_KEY"], "Content-Type": "application/json"},
    )
    print(json.loads(urllib.request.urlopen(request, timeout=30).read())["choices"][0]["message"]["content"])
    print("env holds", sorted(k for k, v in os.environ.items() if "sk-real" in v))
    """
)


def test_an_agent_using_litellm_style_variables_reaches_the_model(rig: Rig, tmp_path: Path) -> None:
    rig.upstream.enqueue(reply("hello from upstream"))
    agent = tmp_path / "agent.py"
    agent.write_text(LITELLM_STYLE_AGENT)
    script = tmp_path / "start.sh"
    script.write_text(f'"{sys.executable}" "{agent}"\n')
    inside = agent_env(rig.gateway.placeholder, INSIDE_URL, ["test-model"])
    urls = {k: v for k, v in inside.items() if INSIDE_URL in v}
    env = {
        "PATH": os.environ["PATH"],
        "RLLOOP_GRADER_URL": rig.relay.url,
        **{k: v for k, v in inside.items() if k not in urls},
    }
    out = subprocess.run(
        ["bash", "-c", launcher(urls), str(script)], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "hello from upstream" in out.stdout and "env holds []" in out.stdout
    assert rig.upstream.chat_requests()[0].headers["authorization"] == f"Bearer {REAL_KEY}"


def test_every_call_is_an_mlflow_trace_linked_to_the_run(rig: Rig, tmp_path: Path) -> None:
    import mlflow

    from agent.external.llm_traces import CallTraces
    from agent.tracking.tracker import Tracker

    tracker = Tracker(f"sqlite:///{tmp_path / 'mlflow.db'}", tmp_path / "mlartifacts")
    parent = tracker.start_parent("gw-run", "arith", {}, environment={})
    traces = CallTraces(tracker, benchmark="arith", run_id="gw-run", parent=parent)
    rig.gateway.on_call = traces
    rig.upstream.enqueue(reply("one", prompt_tokens=3, completion_tokens=2), reply("two"))
    for content in ("first", "second"):
        rig.client.chat.completions.create(
            model="test-model", messages=[{"role": "user", "content": content}]
        )
    with pytest.raises(openai.NotFoundError):  # the upstream's own error is recorded too
        rig.client.chat.completions.create(model="nope", messages=[{"role": "user", "content": "x"}])
    rig.lines(3)  # each call is handed on just after its answer went out
    traces.close()
    assert traces.written == 3
    found = mlflow.search_traces(
        locations=[tracker.experiment_id("arith")], run_id=parent, return_type="list", include_spans=True
    )
    assert len(found) == 3 == len(rig.lines(3))
    spans = sorted((t.data.spans[0] for t in found), key=lambda s: s.start_time_ns)
    assert spans[0].attributes["prompt_tokens"] == 3 and spans[0].attributes["status"] == 200
    assert "first" in json.dumps(spans[0].inputs) and spans[2].attributes["status"] == 404
    assert all(t.info.tags.get("rlloop.run_id") == "gw-run" for t in found)


class RawStreamUpstream:
    """An upstream that streams a chat completion the way some providers and proxies do: no usage event, and its
    bytes cut wherever the network cuts them (here: in the middle of a key it echoes). Real HTTP, real SSE."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces
        served = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def do_POST(self) -> None:  # noqa: N802 (http.server's name)
                self.rfile.read(int(self.headers.get("Content-Length", "0")))
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Transfer-Encoding", "chunked")
                self.end_headers()
                for piece in served.pieces:
                    self.wfile.write(b"%x\r\n%s\r\n" % (len(piece), piece))
                    self.wfile.flush()
                    time.sleep(0.05)  # separate reads on the gateway's side
                self.wfile.write(b"0\r\n\r\n")
                self.wfile.flush()

            def log_message(self, *args: object) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.base_url = f"http://127.0.0.1:{self.server.server_address[1]}/v1"

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def _event(content: str) -> bytes:
    chunk = {"id": "c1", "object": "chat.completion.chunk", "created": 0, "model": "test-model"}
    chunk["choices"] = [{"index": 0, "delta": {"content": content}, "finish_reason": None}]
    return f"data: {json.dumps(chunk)}\n\n".encode()


def _raw_rig(
    tmp_path: Path, pieces: list[bytes], **settings: object
) -> tuple[RawStreamUpstream, ModelGateway]:
    upstream = RawStreamUpstream(pieces)
    config = GatewayConfig(base_url=upstream.base_url, key_env=KEY_ENV, **settings)  # type: ignore[arg-type]
    limits = BudgetLimits(max_tokens=config.max_tokens, max_usd=config.max_usd)
    gateway = ModelGateway(
        config,
        budget=Budget(limits),
        transcript=tmp_path / "agent-llm.jsonl",
        prices=PRICES,
        environ={KEY_ENV: REAL_KEY},
    )
    return upstream, gateway


def test_a_stream_without_usage_is_still_counted_and_capped(tmp_path: Path) -> None:
    """Without an estimate, an upstream that sends no usage would make every cap unreachable."""
    pieces = [_event("x" * 400), _event("y" * 400), b"data: [DONE]\n\n"]
    upstream, gateway = _raw_rig(tmp_path, pieces, max_tokens=300)
    relay = TokenRelay("http://127.0.0.1:9", "grader-token", gateway=gateway)
    try:
        client = openai.OpenAI(base_url=f"{relay.url}/v1", api_key=gateway.placeholder, max_retries=0)
        messages: list[Any] = [{"role": "user", "content": "go"}]
        stream = client.chat.completions.create(model="test-model", messages=messages, stream=True)
        assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "x" * 400 + "y" * 400
        # the gateway records the call after the stream's last byte: wait for the whole line, not the file
        transcript = tmp_path / "agent-llm.jsonl"
        deadline = time.monotonic() + 10
        while not (transcript.exists() and transcript.read_text().endswith("\n")):
            assert time.monotonic() < deadline, "the gateway wrote no transcript line within 10 s"
            time.sleep(0.01)
        (line,) = [json.loads(x) for x in transcript.read_text().splitlines()]
        assert (
            line["estimated"] is True and line["completion_tokens"] >= 200
        )  # 800 characters of text, counted high
        assert gateway.budget.spent().tokens == line["prompt_tokens"] + line["completion_tokens"] > 300
        with pytest.raises(openai.APIStatusError, match="402 - .*token cap of 300"):
            client.chat.completions.create(model="test-model", messages=messages, stream=True)
    finally:
        relay.close()
        gateway.close()
        upstream.close()


def test_a_key_cut_across_two_network_reads_is_still_removed(tmp_path: Path) -> None:
    echoed = _event(f"your key is {REAL_KEY}, keep it")
    cut = echoed.index(REAL_KEY.encode()) + 6
    upstream, gateway = _raw_rig(tmp_path, [echoed[:cut], echoed[cut:], b"data: [DONE]\n\n"])
    relay = TokenRelay("http://127.0.0.1:9", "grader-token", gateway=gateway)
    try:
        with httpx.stream(
            "POST",
            f"{relay.url}/v1/chat/completions",
            json={"model": "test-model", "messages": [{"role": "user", "content": "echo"}], "stream": True},
            headers={"Authorization": f"Bearer {gateway.placeholder}"},
            timeout=30,
        ) as answer:
            body = b"".join(answer.iter_bytes())
        assert b"[key removed]" in body and REAL_KEY.encode() not in body
        assert REAL_KEY[:6].encode() not in body  # not even the half before the cut
    finally:
        relay.close()
        gateway.close()
        upstream.close()


def test_the_results_row_sums_the_runs_llm_ledger(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "ledger-run")
    paths.run_dir.mkdir(parents=True)
    budget = Budget(ledger=paths.budget_ledger)
    budget.record_llm(100, 20, 0.5)
    budget.record_llm(10, 5, 0.25)
    row = result_row(
        RunConfig(home=tmp_path), paths, success=True, external="agent", llm_limit="token cap of 5 reached"
    )
    assert (row.llm_calls, row.llm_tokens, row.llm_cost_usd) == (2, 135, 0.75)
    assert row.llm_limit == "token cap of 5 reached"
    empty = result_row(RunConfig(home=tmp_path), RunPaths(tmp_path, "no-llm"), success=True)
    assert (empty.llm_calls, empty.llm_tokens, empty.llm_cost_usd) == (0, 0, 0.0)


LLM_AGENT = Path(__file__).parents[1] / "fixtures" / "llm_agent"
TRAIN_SCRIPT = (
    "import os, shutil\n"
    "shutil.copytree(os.environ['MODEL_PATH'], os.path.join(os.environ['OUTPUT_DIR'], 'v1'), dirs_exist_ok=True)\n"
    "print('trained: output/v1')\n"
)


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_an_llm_driven_agent_runs_unchanged_through_bench(
    sandbox: str, tiny_model_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The model (the test server) drives the agent's tool loop: it writes and runs a script and submits; the
    submission counts, every call is metered and recorded, the token cap stops it with a readable error the row
    keeps, nothing but the relay is reachable, and the real key is nowhere the agent can see. In the agent image
    on Docker, and in the local sandbox (the host's Python, which has the openai SDK)."""
    from typer.testing import CliRunner

    from agent.cli.commands import app
    from agent.results.rows import read_results
    from tests.support.openai_server import call, tool_calls

    if sandbox == "docker":
        from tests.sandbox.docker_support import require_docker

        require_docker()
    else:  # the agent's `python` is this environment's, as in test_external's local run
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv(KEY_ENV, REAL_KEY)
    with ScriptedOpenAIServer(models=["test-model"], api_key=REAL_KEY) as upstream:
        upstream.enqueue(
            tool_calls(
                call("write_file", {"path": "code/train.py", "content": TRAIN_SCRIPT}),
                prompt_tokens=100,
                completion_tokens=50,
            ),
            tool_calls(
                call("run", {"command": "python code/train.py"}), prompt_tokens=100, completion_tokens=50
            ),
            tool_calls(call("submit", {"model_path": "output/v1"}), prompt_tokens=100, completion_tokens=50),
            reply("done: output/v1 is submitted", prompt_tokens=100, completion_tokens=50),
            reply(
                "I wrote code/train.py, ran it and submitted output/v1.",
                prompt_tokens=100,
                completion_tokens=50,
            ),  # the streamed summary
        )
        args = [
            "bench",
            "--agents",
            str(LLM_AGENT),
            "--benchmarks",
            "arith",
            "--base-models",
            "tiny-arith",
            "--sandbox",
            sandbox,
            "--sweep-id",
            "llm-agent",
            "--eval-limit",
            "8",
            "--timeout",
            "10m",
            "--agent-llm-base-url",
            upstream.base_url,
            "--agent-llm-key-env",
            KEY_ENV,
            "--agent-llm-models",
            "test-model",
            "--llm-max-tokens",
            "750",
            "--home",
            str(tiny_model_home),
        ]
        outcome = CliRunner().invoke(app, args)
        assert outcome.exit_code == 0, outcome.output
        assert len(upstream.chat_requests()) == 5  # the sixth call was refused before it was forwarded
        assert all(r.headers["authorization"] == f"Bearer {REAL_KEY}" for r in upstream.chat_requests())
        assert upstream.chat_requests()[4].body.get("stream") is True
    (run_dir,) = (tiny_model_home / "runs").iterdir()
    log = (run_dir / "trials" / "agent" / "log.txt").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["agent_exit_code"] == 0 and summary["success"] is True, log[-3000:]
    assert summary["grader"]["total_submissions"] == 1 and summary["grader"]["valid_submissions"] == 1
    assert "step 2: run -> exit 0" in log and "submitted:" in log
    assert "summary (streamed): I wrote code/train.py" in log
    assert "model refused (402, budget_exceeded): the run's agent LLM token cap of 750 reached" in log
    assert "egress: blocked" in log
    assert f"key={PLACEHOLDER_PREFIX}" in log  # the agent echoed its key: a placeholder
    llm = summary["agent_llm"]
    assert (llm["calls"], llm["tokens"], llm["refused_over_cap"]) == (5, 750, 1)
    (row,) = [r for r in read_results(tiny_model_home / "results.csv") if r["run_id"] == run_dir.name]
    assert (row["llm_calls"], row["llm_tokens"], row["submissions"]) == ("5", "750", "1")
    assert "token cap of 750 reached" in row["llm_limit"]
    lines = [json.loads(line) for line in (run_dir / "agent-llm.jsonl").read_text().splitlines()]
    assert [line["status"] for line in lines] == [200] * 5 + [402]
    assert sum(int(line["prompt_tokens"]) + int(line["completion_tokens"]) for line in lines) == 750
    agent_env_seen = json.loads((run_dir / "agent" / "agent_env.json").read_text())
    assert agent_env_seen["OPENAI_API_KEY"].startswith(PLACEHOLDER_PREFIX)
    assert agent_env_seen["OPENAI_BASE_URL"] == agent_env_seen["GRADING_SERVER_URL"] + "/v1"
    for path in [*(run_dir / "agent").rglob("*"), run_dir / "trials" / "agent" / "log.txt"]:
        if path.is_file() and not path.is_symlink():
            assert REAL_KEY.encode() not in path.read_bytes(), path  # not in its env, files or log
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_model_home.resolve() / 'mlflow.db'}")
    parent = client.get_run(json.loads((run_dir / "mlflow.json").read_text())["mlflow_parent"])
    traces = client.search_traces(locations=[parent.info.experiment_id], run_id=parent.info.run_id)
    assert len(traces) == 6  # every call, the refused one included, linked to the run
    assert parent.data.metrics["agent_llm_tokens"] == 750 and parent.data.metrics["agent_llm_calls"] == 5
    assert "token cap of 750" in parent.data.tags["rlloop.agent_llm_limit"]
    report = (tiny_model_home / "sweeps" / "llm-agent" / "report.md").read_text()
    assert "| LLM calls | LLM tokens | LLM $ |" in report and "| 5.0 | 750 |" in report


PTB_AGENT = Path(__file__).parents[1] / "fixtures" / "ptb_agent"


def test_a_solve_sh_folder_is_a_posttrainbench_agent(tmp_path: Path) -> None:
    from agent.external.agent_folder import is_agent_folder, load_agent
    from agent.external.posttrainbench import prompt

    spec = load_agent(PTB_AGENT)
    assert is_agent_folder(PTB_AGENT) and spec.contract == "posttrainbench" and spec.start == "solve.sh"
    assert spec.name == "ptb_agent"
    text = prompt("tiny-arith", "arith", "models/tiny-arith", 5400)
    assert "train the small LLM `tiny-arith` to excel at arith" in text and "maximum of 1.5 hours" in text
    assert "final_model" in text and "bash timer.sh" in text


@pytest.mark.slow
@pytest.mark.parametrize("sandbox", [pytest.param("docker", marks=pytest.mark.docker), "local"])
def test_a_posttrainbench_agent_runs_through_the_gateway_and_its_final_model_is_graded(
    sandbox: str, tiny_model_home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PostTrainBench's contract: solve.sh with PROMPT and AGENT_CONFIG, `bash timer.sh`, the model left in
    final_model/ and graded when the agent ends; its model through the same gateway, its log holding only the
    placeholder key."""
    from typer.testing import CliRunner

    from agent.cli.commands import app

    if sandbox == "docker":
        from tests.sandbox.docker_support import require_docker

        require_docker()
    else:
        monkeypatch.setenv("PATH", f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}")
    monkeypatch.setenv(KEY_ENV, REAL_KEY)
    with ScriptedOpenAIServer(models=["test-model"], api_key=REAL_KEY) as upstream:
        upstream.enqueue(reply("copy the base model into final_model", prompt_tokens=30, completion_tokens=8))
        args = [
            "bench",
            *("--agents", str(PTB_AGENT), "--benchmarks", "arith", "--base-models", "tiny-arith"),
            *("--sandbox", sandbox, "--sweep-id", "ptb", "--eval-limit", "8", "--timeout", "10m"),
            *("--agent-llm-base-url", upstream.base_url, "--agent-llm-key-env", KEY_ENV),
            *("--agent-llm-models", "test-model", "--home", str(tiny_model_home)),
        ]
        outcome = CliRunner().invoke(app, args)
        assert outcome.exit_code == 0, outcome.output
        (sent,) = upstream.chat_requests()
        assert sent.headers["authorization"] == f"Bearer {REAL_KEY}"
        assert "train the small LLM `tiny-arith`" in sent.text()  # the agent sent its PROMPT
    (run_dir,) = (tiny_model_home / "runs").iterdir()
    log = (run_dir / "trials" / "agent" / "log.txt").read_text()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["success"] is True and summary["contract"] == "posttrainbench", log[-3000:]
    assert summary["final_model"].startswith("final_model/ submitted")
    assert summary["grader"]["total_submissions"] == 1 and summary["grader"]["copy_model_count"] == 1
    assert "agent_config=test-model" in log and f"key={PLACEHOLDER_PREFIX}" in log
    assert "Remaining time (hours:minutes): 0:" in log and "model says: copy the base model" in log
    assert summary["agent_llm"]["calls"] == 1 and summary["agent_llm"]["tokens"] == 38
    for path in [*(run_dir / "agent").rglob("*"), run_dir / "trials" / "agent" / "log.txt"]:
        if path.is_file() and not path.is_symlink():
            assert REAL_KEY.encode() not in path.read_bytes(), path
