"""The registry of proposers, which `RunConfig.proposer` names. It lives with the run's config, below the proposers,
and is handed its built-ins from above: rlloop's distribution names `agent.proposers.register_builtins` in an entry
point group of its own (`BUILTINS_GROUP`, pyproject.toml), loaded before the plugins' group, so the run's modules
never import, by a statement or by a name in a string, the proposers that stand above them."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tasks.plugins import Registry

if TYPE_CHECKING:
    from agent.core import Proposes
    from agent.llm import Budget

__all__ = ["BUILTINS_GROUP", "PROPOSERS", "ProposerFactory"]

# (config, budget) -> proposer; the config is the run's `agent.run.config.RunConfig` (typed Any here: that module
# checks its `proposer` field against this registry, and a module pair that names each other is a circle)
ProposerFactory = Callable[[Any, "Budget"], "Proposes"]

BUILTINS_GROUP = "rlloop.builtin_proposers"

PROPOSERS: Registry[ProposerFactory] = Registry(
    "proposer", "rlloop.proposers", builtins_group=BUILTINS_GROUP, reserved=("auto",)
)
