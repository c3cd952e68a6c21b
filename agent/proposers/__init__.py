"""Proposers decide the next experiment. A proposer is a factory `(config, budget) -> Proposer` registered under a
name in `PROPOSERS` (plugins: the `rlloop.proposers` entry point group); `RunConfig.proposer` names one, or "auto"
(the LLM proposer when a driver model is set, else the built-in one)."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING

from tasks.plugins import Registry

if TYPE_CHECKING:
    from agent.config import RunConfig
    from agent.llm.budget import Budget
    from agent.proposers.base import Proposer

ProposerFactory = Callable[["RunConfig", "Budget"], "Proposer"]


def _builtin(config: RunConfig, budget: Budget) -> Proposer:
    from agent.proposers.builtin import BuiltinProposer

    return BuiltinProposer(max_steps=config.trial_steps)


def _llm(config: RunConfig, budget: Budget) -> Proposer:
    from agent.proposers.llm import LLMProposer

    return LLMProposer.from_env(
        model=config.driver_model,
        budget=budget,
        price_file=config.llm_price_file,
        max_repair_attempts=config.llm_max_repair_attempts,
    )


def _register_builtins() -> None:
    PROPOSERS.register("builtin", _builtin)
    PROPOSERS.register("llm", _llm)


PROPOSERS: Registry[ProposerFactory] = Registry(
    "proposer", "rlloop.proposers", builtins=_register_builtins, reserved=("auto",)
)


def make_proposer(config: RunConfig, budget: Budget) -> Proposer:
    """The proposer `config` names (`config.proposer_name` resolves "auto")."""
    return PROPOSERS.get(config.proposer_name)(config, budget)
