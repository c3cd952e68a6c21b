"""The driver model's plumbing: an accountable OpenAI-compatible client, prices, budget and retry policy."""

from agent.llm.budget import Budget, BudgetLimits, BudgetSpent
from agent.llm.client import CallRecord, ChatReply, LLMClient, LLMSettings, Message
from agent.llm.errors import LLMBudgetExhaustedError, LLMError, LLMRequestError, LLMUnavailableError
from agent.llm.pricing import ModelPrice, PriceTable, PriceTableError
from agent.llm.retry import RetryPolicy

__all__ = [
    "Budget",
    "BudgetLimits",
    "BudgetSpent",
    "CallRecord",
    "ChatReply",
    "LLMBudgetExhaustedError",
    "LLMClient",
    "LLMError",
    "LLMRequestError",
    "LLMSettings",
    "LLMUnavailableError",
    "Message",
    "ModelPrice",
    "PriceTable",
    "PriceTableError",
    "RetryPolicy",
]
