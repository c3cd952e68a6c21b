"""What the model gateway adds to an external agent's LLM call: median latency through the relay and gateway minus
calling the upstream directly, for a plain and a streamed chat completion. Goal: under 5 ms per request.

The upstream is a minimal local OpenAI-protocol server answering at once, so the difference is the gateway's own
cost (a hop through the relay, the checks, the key swap, metering, the transcript line), not the model's.

    python benchmarks/gateway_latency.py [--requests 300]
"""

from __future__ import annotations

import argparse
import json
import statistics
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import httpx

from agent.external.gateway import ModelGateway
from agent.external.gateway_setup import GatewayConfig
from agent.external.relay import TokenRelay
from agent.llm.budget import Budget
from agent.llm.pricing import PriceTable

ANSWER = {
    "id": "chatcmpl-bench",
    "object": "chat.completion",
    "created": 0,
    "model": "bench-model",
    "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop"}],
    "usage": {"prompt_tokens": 12, "completion_tokens": 1, "total_tokens": 13},
}
EVENTS = [
    {**ANSWER, "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": w}}]}
    for w in ("o", "k")
] + [{**ANSWER, "object": "chat.completion.chunk", "choices": []}]


class Upstream(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    disable_nagle_algorithm = True  # as a real server's: no delayed-ACK stalls to hide the gateway's cost in

    def do_POST(self) -> None:  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        if body.get("stream"):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()
            for event in [*(f"data: {json.dumps(e)}\n\n" for e in EVENTS), "data: [DONE]\n\n"]:
                data = event.encode()
                self.wfile.write(b"%x\r\n%s\r\n" % (len(data), data))
            self.wfile.write(b"0\r\n\r\n")
            return
        data = json.dumps(ANSWER).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
        return


def timed(client: httpx.Client, url: str, key: str, stream: bool, n: int) -> list[float]:
    """Milliseconds of `n` calls, each read to its last byte (after a warm-up)."""
    body = {"model": "bench-model", "messages": [{"role": "user", "content": "hi " * 50}], "stream": stream}
    headers = {"Authorization": f"Bearer {key}"}
    times = []
    for i in range(n + 20):
        started = time.perf_counter()
        with client.stream("POST", url, json=body, headers=headers) as response:
            response.read()
            assert response.status_code == 200, response.text
        if i >= 20:
            times.append((time.perf_counter() - started) * 1000)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--requests", type=int, default=300)
    args = parser.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Upstream)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    upstream = f"http://127.0.0.1:{server.server_address[1]}/v1"
    folder = Path(tempfile.mkdtemp(prefix="rlloop-gateway-bench-"))
    gateway = ModelGateway(
        GatewayConfig(base_url=upstream, key_env="BENCH_KEY", models=("bench-model",)),
        budget=Budget(ledger=folder / "budget.json"),
        transcript=folder / "agent-llm.jsonl",
        prices=PriceTable.default(),
        environ={"BENCH_KEY": "sk-bench"},
    )
    relay = TokenRelay("http://127.0.0.1:9", "grader-token", gateway=gateway)
    print(f"{args.requests} requests each, medians in ms (upstream answers at once)")
    with httpx.Client() as client:
        for stream in (False, True):
            direct = timed(client, f"{upstream}/chat/completions", "sk-bench", stream, args.requests)
            through = timed(
                client, f"{relay.url}/v1/chat/completions", gateway.placeholder, stream, args.requests
            )
            added = statistics.median(through) - statistics.median(direct)
            kind = "streamed" if stream else "plain"
            print(
                f"{kind:>8}: direct {statistics.median(direct):.2f}  through gateway {statistics.median(through):.2f}"
                f"  added {added:.2f} ms ({'under' if added < 5 else 'OVER'} the 5 ms goal)"
            )
    spent = gateway.budget.spent()
    print(f"metered: {spent.llm_calls} calls, {spent.tokens} tokens; transcript {folder / 'agent-llm.jsonl'}")
    relay.close()
    gateway.close()
    server.shutdown()


if __name__ == "__main__":
    main()
