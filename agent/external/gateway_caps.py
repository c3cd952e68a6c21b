"""The run's token and dollar caps over an external agent's model calls, held when calls overlap: with a cap set,
each call reserves what it may cost before it is forwarded, and a call that could cross the cap waits while others
are in flight, so what is spent past a cap is at most one call's worth however many calls arrive at once."""

from __future__ import annotations

import threading
import time

from agent.external.gateway_setup import GatewayConfig
from agent.llm import Budget


class CallCaps:
    """Admission of calls under the caps of `config`, against what `budget` has spent and what calls in flight hold."""

    def __init__(self, config: GatewayConfig, budget: Budget) -> None:
        self.config = config
        self.budget = budget
        # calls in flight and what they reserved (tokens, dollars), under one condition
        self._admission = threading.Condition()
        self._in_flight = 0
        self._reserved_tokens = 0
        self._reserved_usd = 0.0

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

    def admit(self, tokens: int, usd: float) -> tuple[str | None, float]:
        """Wait until a call that may cost `tokens` and `usd` can go: at once while the calls in flight leave room
        under the caps, or when none is in flight; never while a cap is spent (then the reason, to refuse it).
        Returns (the refusal's reason or None, seconds waited). A call let through must be `release`d."""
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

    def release(self, tokens: int, usd: float) -> None:
        """A call let through by `admit` has ended (its cost recorded): its reservation goes, waiting calls look."""
        with self._admission:
            self._in_flight -= 1
            self._reserved_tokens -= tokens
            self._reserved_usd -= usd
            self._admission.notify_all()
