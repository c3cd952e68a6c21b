"""Proposers decide the next experiment. A proposer is a factory `(config, budget) -> Proposer` registered under a
name in `PROPOSERS` (plugins: the `rlloop.proposers` entry point group); `RunConfig.proposer` names one, or "auto"
(the LLM proposer when a driver model is set, else the built-in one)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from agent.core import Proposal, ProposalContext, Proposes, lazy_face
from agent.proposers.base import Proposer, ProposerBase, SearchDone, with_hooks
from agent.run import PROPOSERS

if TYPE_CHECKING:
    from agent.llm import Budget
    from agent.proposers.memory import remember_run
    from agent.proposers.proposal_paths import (
        LOOP_OWNED_FIELDS,
        closed_field_problems,
        is_path_name,
        proposal_problems,
    )
    from agent.proposers.static_check import check_code
    from agent.run import RunConfig

__all__ = [
    "LOOP_OWNED_FIELDS",
    "PROPOSERS",
    "Proposal",
    "ProposalContext",
    "Proposer",
    "ProposerBase",
    "SearchDone",
    "check_code",
    "closed_field_problems",
    "is_path_name",
    "make_proposer",
    "proposal_problems",
    "register_builtins",
    "remember_run",
]


# what `builtin` (the default without a driver model) runs; measured in benchmarks/research_ladder.py
BUILTIN_POLICY = "lines"


def _builtin(config: RunConfig, budget: Budget) -> Proposes:
    policy = {"greedy": _greedy, "tree": _tree, "lines": _lines}[BUILTIN_POLICY]
    return policy(config, budget, "builtin")


def _greedy(config: RunConfig, budget: Budget, name: str = "greedy") -> Proposes:
    from agent.proposers.builtin import BuiltinProposer

    return BuiltinProposer(max_steps=config.trial_steps, name=name)


def _tree(config: RunConfig, budget: Budget, name: str = "tree") -> Proposes:
    from agent.proposers.tree import TreeProposer

    return TreeProposer(max_steps=config.trial_steps, name=name)


def _tree_optuna(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.numeric import NumericHalf
    from agent.proposers.tree import TreeProposer

    return TreeProposer(max_steps=config.trial_steps, name="tree-optuna", numeric=NumericHalf("tpe"))


def _random(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.random_search import RandomProposer

    return RandomProposer(max_steps=config.trial_steps)


def _lines(config: RunConfig, budget: Budget, name: str = "lines") -> Proposes:
    from agent.proposers.lines import LineProposer

    return LineProposer(max_steps=config.trial_steps, name=name)


def _halving(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.halving import HalvingProposer

    return HalvingProposer(max_steps=config.trial_steps)


def _optuna(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.numeric import NumericProposer

    return NumericProposer("tpe", max_steps=config.trial_steps, name="optuna")


def _cmaes(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.numeric import NumericProposer

    return NumericProposer("cmaes", max_steps=config.trial_steps, name="cmaes")


def _fixed(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.fixed import FixedProposer

    return FixedProposer(max_steps=config.trial_steps)


def _llm(config: RunConfig, budget: Budget) -> Proposes:
    from agent.proposers.llm import LLMProposer

    return LLMProposer.from_env(
        model=config.driver_model,
        budget=budget,
        price_file=config.llm_price_file,
        max_repair_attempts=config.llm_max_repair_attempts,
        max_tool_calls=config.llm_max_tool_calls,
    )


def register_builtins() -> None:
    """The built-in proposers, registered in `PROPOSERS` (which calls this when it is first used)."""
    PROPOSERS.register("builtin", _builtin)
    PROPOSERS.register("greedy", _greedy)
    PROPOSERS.register("tree", _tree)
    PROPOSERS.register("tree-optuna", _tree_optuna)
    PROPOSERS.register("random", _random)
    PROPOSERS.register("halving", _halving)
    PROPOSERS.register("lines", _lines)
    PROPOSERS.register("optuna", _optuna)
    PROPOSERS.register("cmaes", _cmaes)
    PROPOSERS.register("fixed", _fixed)
    PROPOSERS.register("llm", _llm)


def make_proposer(config: RunConfig, budget: Budget) -> Proposer:
    """The proposer `config` names (`config.proposer_name` resolves "auto"), with the loop's hooks."""
    return with_hooks(PROPOSERS.get(config.proposer_name)(config, budget))


# The face of this part: what the other parts of agent/ may use of it (tests/test_layers.py holds them to it), each
# name loaded from the module that defines it on first use, so importing one module of the part loads no other.
_FACE: dict[str, str] = {
    "LOOP_OWNED_FIELDS": "agent.proposers.proposal_paths",
    "check_code": "agent.proposers.static_check",
    "closed_field_problems": "agent.proposers.proposal_paths",
    "is_path_name": "agent.proposers.proposal_paths",
    "proposal_problems": "agent.proposers.proposal_paths",
    "remember_run": "agent.proposers.memory",
}


__getattr__ = lazy_face(__name__, _FACE)
