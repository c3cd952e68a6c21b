"""Errors the LLM layer raises: each carries one line a person can act on, never a stack of SDK internals."""

from __future__ import annotations


class LLMError(RuntimeError):
    """Anything that stops the driver model from answering; the loop catches this to end a run cleanly."""


class LLMUnavailableError(LLMError):
    """The endpoint cannot answer (nothing listening, key rejected, model missing, kept failing): end the run."""


class LLMRequestError(LLMError):
    """The endpoint refused this request (HTTP 400/422 and the like); retrying the same request will not help."""


class LLMBudgetExhaustedError(LLMError):
    """The run's LLM budget (USD, tokens or compute) is spent; no further call is made."""
