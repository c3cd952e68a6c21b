"""The driver model's plumbing: an accountable OpenAI-compatible client, prices, budget and retry policy."""

from agent.llm.budget import Budget, BudgetLimits, BudgetSpent
from agent.llm.client import CallRecord, ChatReply, LLMClient, LLMSettings, Message
from agent.llm.errors import LLMBudgetExhaustedError, LLMError, LLMUnavailableError
from agent.llm.pricing import PriceTable, PriceTableError
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
    "LLMSettings",
    "LLMUnavailableError",
    "Message",
    "PriceTable",
    "PriceTableError",
    "RetryPolicy",
]
