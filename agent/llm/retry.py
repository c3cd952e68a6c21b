"""When to try a failed LLM call again, and how long to wait: bounded attempts, bounded total time, jittered backoff."""

from __future__ import annotations

import random

from pydantic import BaseModel, ConfigDict, Field

RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504, 520, 522, 524, 529})


class RetryPolicy(BaseModel):
    """Exponential backoff with equal jitter; a server's Retry-After wins when it is within `max_retry_after_s`."""

    model_config = ConfigDict(extra="forbid")

    max_attempts: int = Field(default=5, ge=1, description="Attempts per call, the first included.")
    initial_backoff_s: float = Field(default=1.0, ge=0)
    max_backoff_s: float = Field(default=30.0, ge=0)
    max_total_s: float = Field(default=180.0, gt=0, description="Give up once a call has taken this long.")
    max_retry_after_s: float = Field(default=60.0, ge=0, description="Longest Retry-After honoured.")

    def backoff(self, attempt: int, rng: random.Random, retry_after: float | None = None) -> float:
        """Seconds to wait after failed attempt number `attempt` (1-based)."""
        if retry_after is not None and retry_after >= 0:
            return min(retry_after, self.max_retry_after_s)
        ceiling = min(self.max_backoff_s, self.initial_backoff_s * 2 ** (attempt - 1))
        return ceiling / 2 + rng.uniform(0, ceiling / 2)


def parse_retry_after(value: str | None) -> float | None:
    """Seconds from a Retry-After / retry-after-ms header value; None when absent or an HTTP date."""
    if not value:
        return None
    try:
        return max(0.0, float(value))
    except ValueError:
        return None
