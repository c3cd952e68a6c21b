"""The registry of proposers, which `RunConfig.proposer` names. It lives with the run's config, below the proposers:
its built-ins (`agent.proposers.register_builtins`) are loaded by name when the registry is first used, as the
entry points of plugins are, so the run's modules never import the proposers that stand above them."""

from __future__ import annotations

from collections.abc import Callable
from importlib import import_module
from typing import TYPE_CHECKING, Any

from tasks.plugins import Registry

if TYPE_CHECKING:
    from agent.core import Proposes
    from agent.llm import Budget

__all__ = ["PROPOSERS", "ProposerFactory"]

# (config, budget) -> proposer; the config is the run's `agent.run.config.RunConfig` (typed Any here: that module
# checks its `proposer` field against this registry, and a module pair that names each other is a circle)
ProposerFactory = Callable[[Any, "Budget"], "Proposes"]


def _register_builtins() -> None:
    import_module("agent.proposers").register_builtins()


PROPOSERS: Registry[ProposerFactory] = Registry(
    "proposer", "rlloop.proposers", builtins=_register_builtins, reserved=("auto",)
)
