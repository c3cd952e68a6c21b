"""`LLMProposer`: a driver model (any OpenAI-compatible endpoint) chooses the next trial and repairs broken scripts.

Every answer is validated as hard as the loop would: JSON, the `Proposal` schema, a known recipe, hyperparameters
that are fields of that recipe's config with valid values, an `init_from` that names a trial with a checkpoint, and a
`train_py` that compiles. A rejected answer goes back to the model with the reasons, up to `max_repair_attempts`
times, then `ProposalError`. Tokens and dollars of every call land in the client's `calls` and its `Budget`.

Inside a run (`attach_run`) the model may first call tools (`agent.proposers.tools`): up to `max_tool_calls` per proposal,
each recorded in trials/<id>/proposal_tools.jsonl, the run log and the node's MLflow trace. Tool rounds are not
answers and do not use up repair attempts; once the tool budget is spent the model is told to answer, and a model
that keeps calling tools is rejected like any other bad answer (so `ProposalError` ends it, with that reason).
"""

from __future__ import annotations

import json
import logging
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.core import Proposal, ProposalContext
from agent.llm import (
    Budget,
    CallRecord,
    ChatReply,
    LLMClient,
    LLMError,
    LLMSettings,
    LLMUnavailableError,
    Message,
    PriceTable,
)
from agent.proposers.base import ProposerBase, RunView
from agent.proposers.prompts import (
    echo,
    proposal_prompt,
    proposal_schema,
    rejection_message,
    repair_prompt,
    system_prompt,
    tool_budget_spent,
    tools_note,
)
from agent.proposers.proposal_paths import closed_field_problems, proposal_problems
from agent.proposers.recipes import RecipeCatalog
from agent.proposers.static_check import check_code
from agent.proposers.tools import ToolCallRecord, ToolEnv, call_tool, tool_specs
from agent.tracking import child_span
from tasks.atomic import atomic_write_text

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


def optimizer_view(context: ProposalContext) -> str | None:
    """A numeric optimizer's view of the trials (agent.proposers.numeric.advice), or None where it has none."""
    from agent.proposers.numeric import advice

    try:
        return advice(context, seed=context.seed)
    except Exception as exc:  # noqa: BLE001 - a second opinion only: the proposal goes on without it
        logger.warning("no numeric optimizer view: %s", exc)
        return None


class LLMProposer(ProposerBase):
    """Proposes trials with a driver model; implements `agent.proposers.base.Proposer`."""

    name = "llm"

    def __init__(
        self,
        client: LLMClient,
        model: str | None = None,
        *,
        max_repair_attempts: int = 2,
        catalog: RecipeCatalog | None = None,
        max_tool_calls: int = 8,
        tool_env: ToolEnv | None = None,
        lessons: str | None = None,
    ) -> None:
        if max_repair_attempts < 0:
            raise ValueError(f"max_repair_attempts must be >= 0, got {max_repair_attempts}")
        if max_tool_calls < 0:
            raise ValueError(f"max_tool_calls must be >= 0, got {max_tool_calls}")
        self.client = client
        self.model = model or client.model  # the driver model; defaults to the client's (--driver-model)
        self.max_repair_attempts = max_repair_attempts  # re-asks after the first answer
        self.max_tool_calls = max_tool_calls  # per proposal; tools are offered only with a tool_env
        self.tool_env = tool_env
        self.lessons = lessons  # what earlier runs learned (agent.proposers.memory), shown in the prompt
        self.tool_calls: list[ToolCallRecord] = []  # the last proposal's tool calls
        self.on_tool_call: Callable[[ToolCallRecord], None] | None = None  # e.g. a line in the run log
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
        max_tool_calls: int = 8,
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
        return cls(client, max_repair_attempts=max_repair_attempts, max_tool_calls=max_tool_calls)

    def attach_run(self, run: RunView, trial_id: str) -> None:
        """Called by the loop before each proposal with its live resources (`agent.loop.resources.RunResources`): tools
        read that run's workspace and run scripts in its sandbox; calls are logged to its run log; lessons come
        from its memory when the run has `--memory`."""
        from rich.markup import escape

        self.tool_env = ToolEnv.from_run(run, trial_id, [])  # the trials come with each proposal's context
        self.on_tool_call = lambda r: run.reporter.info(
            f"    [dim]tool {r.name}({escape(_args_text(r.arguments))}): {escape(r.summary)} ({r.seconds:.2f}s)[/dim]"
        )
        if run.config.memory and self.lessons is None:
            from agent.proposers.memory import lessons_text

            self.lessons = lessons_text(run.config.home, run.config.benchmark, run.config.base_model)

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
        env = self.tool_env if self.max_tool_calls > 0 else None
        if env is not None:
            env.trials = list(context.trials)
        self.tool_calls = []
        system = system_prompt() + (tools_note(self.max_tool_calls) if env is not None else "")
        messages: list[Message] = [
            {"role": "system", "content": system},
            {
                "role": "user",
                "content": proposal_prompt(
                    context, catalog, self.client.budget, self.lessons, optimizer=optimizer_view(context)
                ),
            },
        ]
        try:
            return self._ask(messages, catalog, context, purpose="propose", need_code=False, env=env)
        finally:
            if env is not None:
                self._write_tool_log(env)

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
        if context is not None:  # paths as a trial sees them (sandbox.view); the trial's own check repeats it
            errors += proposal_problems(
                proposal.hyperparameters,
                config_class=None if proposal.train_py else catalog.recipes.get(proposal.recipe),
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
        env: ToolEnv | None = None,
    ) -> Proposal:
        schema = proposal_schema(catalog.names())
        errors: list[str] = []
        attempts = 1 + self.max_repair_attempts
        tools = tool_specs(env.tool_names()) if env is not None else None
        attempt = 0
        while attempt < attempts:
            spent = env is not None and len(self.tool_calls) >= self.max_tool_calls
            reply = self._chat(messages, schema, purpose, tools, "none" if spent else None)
            if reply.tool_calls and env is not None and not spent:
                messages = [*messages, reply.as_message(), *self._run_tools(env, reply)]
                if len(self.tool_calls) >= self.max_tool_calls:
                    messages.append({"role": "user", "content": tool_budget_spent(self.max_tool_calls)})
                continue  # looking is not answering: no attempt used
            attempt += 1
            if reply.tool_calls:  # tools past the budget (or none offered): a rejected answer
                errors = [
                    f"it kept calling tools ({', '.join(c.name for c in reply.tool_calls)}) after its budget of "
                    f"{self.max_tool_calls} tool calls was spent; reply with the JSON proposal"
                ]
                logger.info("%s attempt %d/%d rejected: %s", purpose, attempt, attempts, errors[0])
                refused = [
                    {"role": "tool", "tool_call_id": c.id, "content": "error: no tool calls left"}
                    for c in reply.tool_calls
                ]
                messages = [
                    *messages,
                    reply.as_message(),
                    *refused,
                    {"role": "user", "content": rejection_message(errors)},
                ]
                continue
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
            messages = [  # (a reply with tool calls never reaches here: those were answered above)
                *messages,
                {"role": "assistant", "content": echo(reply.content or "")},
                {"role": "user", "content": rejection_message(errors)},
            ]
        raise ProposalError(
            f"the driver model gave no valid proposal in {attempts} attempts ({purpose}); last problem: {errors[0]}",
            attempts=attempts,
            errors=errors,
        )

    def _chat(
        self,
        messages: list[Message],
        schema: dict[str, Any],
        purpose: str,
        tools: list[dict[str, Any]] | None,
        tool_choice: str | None,
    ) -> ChatReply:
        """One driver-model call, as a span of the active trace."""
        with child_span(f"llm:{purpose}", "CHAT_MODEL", {"model": self.model, "messages": messages}) as span:
            reply = self.client.chat_json(
                messages,
                schema=schema,
                schema_name="Proposal",
                purpose=purpose,
                model=self.model,
                tools=tools,
                tool_choice=tool_choice,
            )
            if span is not None:
                span.set_outputs(reply.as_message())
                span.set_attributes(reply.record.model_dump(mode="json"))
        return reply

    def _run_tools(self, env: ToolEnv, reply: ChatReply) -> list[Message]:
        """Answer each tool call of a reply, within the budget; a call past it is answered with an error."""
        answers: list[Message] = []
        for call in reply.tool_calls:
            if len(self.tool_calls) >= self.max_tool_calls:
                content = f"error: the budget of {self.max_tool_calls} tool calls is spent"
            else:
                with child_span(f"tool:{call.name}", "TOOL", {"arguments": call.arguments}) as span:
                    record = call_tool(env, call.id, call.name, call.arguments)
                    if span is not None:
                        span.set_outputs(
                            {"ok": record.ok, "summary": record.summary, "result": record.result}
                        )
                        span.set_attribute("seconds", record.seconds)
                self.tool_calls.append(record)
                if self.on_tool_call is not None:
                    self.on_tool_call(record)
                logger.info("tool %s: %s (%.2fs)", record.name, record.summary, record.seconds)
                content = record.result
            answers.append({"role": "tool", "tool_call_id": call.id, "content": content})
        return answers

    def _write_tool_log(self, env: ToolEnv) -> None:
        """trials/<id>/proposal_tools.jsonl: one line per tool call of this proposal (rewritten whole, atomically)."""
        if not self.tool_calls:
            return
        text = "".join(record.model_dump_json() + "\n" for record in self.tool_calls)
        try:
            atomic_write_text(env.record_dir(env.trial_id) / "proposal_tools.jsonl", text)
        except OSError as exc:
            logger.warning("could not write the tool log of %s: %s", env.trial_id, exc)


def _args_text(arguments: dict[str, Any] | str, limit: int = 80) -> str:
    text = (
        ", ".join(f"{k}={v!r}" for k, v in arguments.items())
        if isinstance(arguments, dict)
        else str(arguments)
    )
    text = " ".join(text.split())
    return text if len(text) <= limit else text[: limit - 3] + "..."
