"""How much of a run's allowance is spent: LLM dollars and tokens, and trial compute seconds.

One `Budget` is shared by the LLM client (which records every call) and the loop (which records trial time and asks
`exhausted()` before starting more work). Limits of None mean unlimited. With a ledger file the totals survive a crash:
every record is written through (atomically), and a resumed run starts from what was already spent.
"""

from __future__ import annotations

import logging
import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from tasks.atomic import atomic_write_text

log = logging.getLogger(__name__)


class BudgetLimits(BaseModel):
    """The allowance; a natural section of a run's config."""

    model_config = ConfigDict(extra="forbid")

    max_usd: float | None = Field(default=None, ge=0, description="LLM spend in USD.")
    max_tokens: int | None = Field(default=None, ge=0, description="LLM prompt + completion tokens.")
    max_compute_s: float | None = Field(default=None, ge=0, description="Trial compute seconds.")


class BudgetSpent(BaseModel):
    """A snapshot of what has been used so far."""

    usd: float = 0.0
    tokens: int = 0
    prompt_tokens: int = 0
    completion_tokens: int = 0
    compute_s: float = 0.0
    llm_calls: int = 0


class Budget:
    """Thread-safe running totals checked against `BudgetLimits`."""

    def __init__(self, limits: BudgetLimits | None = None, ledger: Path | None = None) -> None:
        self.limits = limits or BudgetLimits()
        self.ledger = ledger
        self._spent = self._read_ledger(ledger) if ledger else BudgetSpent()
        self._lock = threading.Lock()

    @staticmethod
    def _read_ledger(path: Path) -> BudgetSpent:
        try:
            return BudgetSpent.model_validate_json(path.read_text())
        except FileNotFoundError:
            return BudgetSpent()
        except ValueError as exc:
            raise ValueError(
                f"the budget ledger {path} is unreadable ({exc.__class__.__name__}); fix or delete it to start the "
                "run's spend from zero"
            ) from None

    def _write_ledger(self) -> None:
        """Called with the lock held: the file always holds a complete snapshot (temp file + rename)."""
        if self.ledger is None:
            return
        try:
            atomic_write_text(self.ledger, self._spent.model_dump_json())
        except OSError as exc:
            log.warning("could not write the budget ledger %s: %s", self.ledger, exc)

    def record_llm(self, prompt_tokens: int, completion_tokens: int, usd: float) -> None:
        with self._lock:
            s = self._spent
            s.prompt_tokens += prompt_tokens
            s.completion_tokens += completion_tokens
            s.tokens += prompt_tokens + completion_tokens
            s.usd += usd
            s.llm_calls += 1
            self._write_ledger()

    def record_compute(self, seconds: float) -> None:
        if seconds < 0:
            raise ValueError(f"compute seconds must be >= 0, got {seconds}")
        with self._lock:
            self._spent.compute_s += seconds
            self._write_ledger()

    def spent(self) -> BudgetSpent:
        with self._lock:
            return self._spent.model_copy()

    def exhausted(self) -> str | None:
        """Why the budget is spent (one line), or None while there is some left."""
        spent, limits = self.spent(), self.limits
        if limits.max_usd is not None and spent.usd >= limits.max_usd:
            return f"LLM spend ${spent.usd:.4f} reached the budget of ${limits.max_usd:.4f}"
        if limits.max_tokens is not None and spent.tokens >= limits.max_tokens:
            return f"LLM tokens {spent.tokens} reached the budget of {limits.max_tokens}"
        if limits.max_compute_s is not None and spent.compute_s >= limits.max_compute_s:
            return f"compute {spent.compute_s:.0f}s reached the budget of {limits.max_compute_s:.0f}s"
        return None

    def summary(self) -> str:
        """One line for prompts and logs: what is spent, against which limit."""
        spent, limits = self.spent(), self.limits

        def of(value: str, limit: object | None) -> str:
            return value if limit is None else f"{value} of {limit}"

        usd_limit = None if limits.max_usd is None else f"${limits.max_usd:.4f}"
        return (
            f"LLM spend {of(f'${spent.usd:.4f}', usd_limit)}, "
            f"LLM tokens {of(str(spent.tokens), limits.max_tokens)}, "
            f"compute {of(f'{spent.compute_s:.0f}s', None if limits.max_compute_s is None else f'{limits.max_compute_s:.0f}s')}"
        )
