"""`LLMProposer`: a driver model (any OpenAI-compatible endpoint) chooses the next trial and repairs broken scripts.

Every answer is validated as hard as the loop would: JSON, the `Proposal` schema, a known recipe, hyperparameters
that are fields of that recipe's config with valid values, an `init_from` that names a trial with a checkpoint, and a
`train_py` that compiles. A rejected answer goes back to the model with the reasons, up to `max_repair_attempts`
times, then `ProposalError`. Tokens and dollars of every call land in the client's `calls` and its `Budget`.
"""

from __future__ import annotations

import json
import logging
import re
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.llm.budget import Budget
from agent.llm.client import CallRecord, LLMClient, LLMSettings, Message
from agent.llm.codecheck import check_code
from agent.llm.errors import LLMError, LLMUnavailableError
from agent.llm.pricing import PriceTable
from agent.llm.prompts import (
    echo,
    proposal_prompt,
    proposal_schema,
    rejection_message,
    repair_prompt,
    system_prompt,
)
from agent.llm.recipes import RecipeCatalog
from agent.proposal_paths import closed_field_problems, proposal_problems
from agent.proposers.base import Proposal, ProposalContext

logger = logging.getLogger(__name__)

__all__ = ["LLMProposer", "ProposalError", "check_code", "parse_proposal"]

_FENCE = re.compile(r"^```[a-zA-Z0-9_-]*\s*\n?(.*?)\n?```\s*$", re.DOTALL)


class ProposalError(LLMError):
    """The driver model kept answering with proposals that fail validation."""

    def __init__(self, message: str, attempts: int, errors: list[str]) -> None:
        super().__init__(message)
        self.attempts = attempts
        self.errors = errors


def _json_text(content: str) -> str:
    """The JSON object in a reply, tolerating ```json fences and prose around it."""
    text = content.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    if not text.startswith("{"):
        start, end = text.find("{"), text.rfind("}")
        if start != -1 and end > start:
            text = text[start : end + 1]
    return text


def _pydantic_errors(exc: ValidationError) -> list[str]:
    out = []
    for error in exc.errors():
        where = ".".join(str(part) for part in error["loc"]) or "proposal"
        out.append(f"{where}: {error['msg']}")
    return out


def parse_proposal(content: str | None) -> tuple[Proposal | None, list[str]]:
    """Parse a reply into a Proposal; on failure, the reasons (one line each) to feed back."""
    if content is None or not content.strip():
        return None, ["empty reply: send one JSON object"]
    try:
        data: Any = json.loads(_json_text(content))
    except json.JSONDecodeError as exc:
        return None, [f"invalid JSON: {exc.msg} at line {exc.lineno} column {exc.colno}"]
    if not isinstance(data, dict):
        return None, [f"expected a JSON object, got {type(data).__name__}"]
    try:
        return Proposal.model_validate(data), []
    except ValidationError as exc:
        return None, ["schema violation: " + error for error in _pydantic_errors(exc)]


class LLMProposer:
    """Proposes trials with a driver model; implements `agent.proposers.base.Proposer`."""

    name = "llm"

    def __init__(
        self,
        client: LLMClient,
        model: str | None = None,
        *,
        max_repair_attempts: int = 2,
        catalog: RecipeCatalog | None = None,
    ) -> None:
        if max_repair_attempts < 0:
            raise ValueError(f"max_repair_attempts must be >= 0, got {max_repair_attempts}")
        self.client = client
        self.model = model or client.model  # the driver model; defaults to the client's (--driver-model)
        self.max_repair_attempts = max_repair_attempts  # re-asks after the first answer
        self._catalog = catalog
        self._last_context: ProposalContext | None = None

    @classmethod
    def from_env(
        cls,
        model: str | None,
        *,
        budget: Budget | None = None,
        price_file: str | Path | None = None,
        max_repair_attempts: int = 2,
        **settings: Any,
    ) -> LLMProposer:
        """The proposer `rlloop run --driver-model M` wants: endpoint and key from OPENAI_BASE_URL/OPENAI_API_KEY,
        prices from the defaults + RLLOOP_LLM_PRICES + `price_file`, and the run's shared budget."""
        prices = PriceTable.from_env()
        if price_file is not None:
            prices = prices.merged(PriceTable.from_file(price_file))
        if not model:
            raise LLMUnavailableError("the llm proposer needs a driver model: pass --driver-model NAME")
        client = LLMClient(LLMSettings.from_env(model, **settings), prices=prices, budget=budget)
        return cls(client, max_repair_attempts=max_repair_attempts)

    @property
    def calls(self) -> list[CallRecord]:
        """Every driver-model call so far, with tokens and cost."""
        return self.client.calls

    def catalog_for(self, context: ProposalContext | None) -> RecipeCatalog:
        """The given catalog, else `trainers.registry` limited to the context's recipes (names only if missing)."""
        if self._catalog is None:
            self._catalog = RecipeCatalog.from_registry(context.recipes if context else ())
        if context is not None and context.recipes and set(context.recipes) != set(self._catalog.recipes):
            return RecipeCatalog({name: self._catalog.recipes.get(name) for name in context.recipes})
        return self._catalog

    def propose(self, context: ProposalContext) -> Proposal:
        self._last_context = context
        catalog = self.catalog_for(context)
        messages: list[Message] = [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": proposal_prompt(context, catalog, self.client.budget)},
        ]
        return self._ask(messages, catalog, context, purpose="propose", need_code=False)

    def repair(self, proposal: Proposal, failure: str, context: ProposalContext | None = None) -> Proposal:
        """Ask for a fixed proposal given the failure (SyntaxError line, traceback, log tail)."""
        context = context or self._last_context
        catalog = self.catalog_for(context)
        messages: list[Message] = [
            {"role": "system", "content": system_prompt()},
            {"role": "user", "content": repair_prompt(proposal, failure)},
        ]
        return self._ask(
            messages, catalog, context, purpose="repair", need_code=proposal.train_py is not None
        )

    def validate(
        self,
        proposal: Proposal,
        catalog: RecipeCatalog,
        context: ProposalContext | None,
        need_code: bool = False,
    ) -> list[str]:
        """Everything the loop would trip over later, one line each."""
        errors = []
        if proposal.train_py is None:
            if need_code:
                errors.append("train_py is missing: return the complete corrected script")
            errors += catalog.validate(proposal.recipe, proposal.hyperparameters)
        else:
            problem = check_code(proposal.train_py)
            if problem:
                errors.append(problem)
            errors += closed_field_problems(proposal.hyperparameters)
        if context is not None and context.workspace:
            errors += proposal_problems(
                proposal.hyperparameters,
                config_class=None if proposal.train_py else catalog.recipes.get(proposal.recipe),
                workspace=Path(context.workspace),
                base_model=Path(context.base_model_path) if context.base_model_path else None,
                check_closed=False,  # reported above (catalog.validate, or closed_field_problems for code)
            )
        if proposal.init_from is not None and context is not None:
            usable = {t.trial_id for t in context.trials if t.status == "succeeded" or t.checkpoint}
            if proposal.init_from not in usable:
                choices = ", ".join(sorted(usable)) or "none yet"
                errors.append(
                    f"init_from {proposal.init_from!r} is not a trial with a checkpoint; use null or one of: {choices}"
                )
        if proposal.estimated_cost_s is not None and proposal.estimated_cost_s < 0:
            errors.append("estimated_cost_s must be >= 0")
        return errors

    def _ask(
        self,
        messages: list[Message],
        catalog: RecipeCatalog,
        context: ProposalContext | None,
        *,
        purpose: str,
        need_code: bool,
    ) -> Proposal:
        schema = proposal_schema(catalog.names())
        errors: list[str] = []
        attempts = 1 + self.max_repair_attempts
        for attempt in range(1, attempts + 1):
            reply = self.client.chat_json(
                messages, schema=schema, schema_name="Proposal", purpose=purpose, model=self.model
            )
            if reply.refusal:
                errors = [f"refused: {reply.refusal}"]
            else:
                proposal, errors = parse_proposal(reply.content)
                if proposal is not None:
                    errors = self.validate(proposal, catalog, context, need_code)
                    if not errors:
                        return proposal
                if reply.finish_reason == "length":
                    errors.append("the reply was cut off (finish_reason=length): answer more briefly")
            logger.info("%s attempt %d/%d rejected: %s", purpose, attempt, attempts, "; ".join(errors))
            messages = [
                *messages,
                {"role": "assistant", "content": echo(reply.content or "")},
                {"role": "user", "content": rejection_message(errors)},
            ]
        raise ProposalError(
            f"the driver model gave no valid proposal in {attempts} attempts ({purpose}); last problem: {errors[0]}",
            attempts=attempts,
            errors=errors,
        )
