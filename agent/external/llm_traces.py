"""An external agent's model calls as MLflow traces linked to its run, written off the request path.

Each `GatewayCall` becomes one trace of one LLM span (its inputs the clipped messages, its outputs the clipped answer,
its attributes the model, tokens, cost, latency and status), tagged with the run id and linked to the run's parent so
the run's page lists them. A background thread writes them, so the agent never waits on the tracking store; a
tracing failure is logged once, never raised (the JSONL transcript is the record that always exists).
"""

from __future__ import annotations

import logging
import queue
import threading

from agent.external.gateway_setup import GatewayCall
from agent.tracking import PARENT_TAG, Tracker

log = logging.getLogger(__name__)
AGENT_LLM_KIND = "agent_llm"  # the `rlloop.kind` tag of these traces


class CallTraces:
    """`on_call` for the gateway: queue each call; `close` waits until all are written."""

    def __init__(self, tracker: Tracker, *, benchmark: str, run_id: str, parent: str) -> None:
        self.tracker = tracker
        self.experiment_id = tracker.experiment_id(benchmark)
        self.run_id = run_id
        self.parent = parent
        self.written = 0
        self._queue: queue.Queue[GatewayCall | None] = queue.Queue()
        self._failed = False
        self._closed = False
        self._thread = threading.Thread(target=self._work, name="rlloop-llm-traces", daemon=True)
        self._thread.start()

    def __call__(self, call: GatewayCall) -> None:
        if self._closed:  # a call that ended as the relay shut down: written here, not lost
            self._write_safely(call)
            return
        self._queue.put(call)

    def close(self, timeout_s: float = 60.0) -> None:
        self._closed = True
        self._queue.put(None)
        self._thread.join(timeout=timeout_s)

    def _work(self) -> None:
        while (call := self._queue.get()) is not None:
            self._write_safely(call)

    def _write_safely(self, call: GatewayCall) -> None:
        try:
            self._write(call)
            self.written += 1
        except Exception as exc:
            if not self._failed:
                self._failed = True
                log.warning("could not write the MLflow trace of an agent LLM call: %s", exc)

    def _write(self, call: GatewayCall) -> None:
        import mlflow

        start_ns = int(call.time * 1e9)
        span = mlflow.start_span_no_context(
            f"agent_llm {call.method} {call.path}",
            span_type="CHAT_MODEL",
            inputs={"model": call.model, "stream": call.stream, "messages": call.request},
            tags={PARENT_TAG: self.run_id, "rlloop.kind": AGENT_LLM_KIND},
            experiment_id=self.experiment_id,
            start_time_ns=start_ns,
        )
        attributes = {
            "model": call.model or "",
            "status": call.status,
            "prompt_tokens": call.prompt_tokens,
            "completion_tokens": call.completion_tokens,
            "cost_usd": call.cost_usd,
            "latency_ms": call.latency_ms,
            **({"refused": call.refused} if call.refused else {}),
        }
        span.end(
            outputs={"response": call.response, **({"refused": call.refused} if call.refused else {})},
            attributes=attributes,
            status="OK" if call.status < 400 else "ERROR",
            end_time_ns=start_ns + int(call.latency_ms * 1e6),
        )
        self.tracker.link(span.trace_id, self.parent)
