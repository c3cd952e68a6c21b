"""Recipe registry: a name maps to a pydantic config class and a run function, like Inspect AI's registries.

Recipes live in the project's one plugin registry (`tasks.plugins.Registry`, group `rlloop.recipes`). Built-ins are
the modules in `BUILTIN_MODULES`: each calls `register_recipe` once per recipe it defines (opcd.py registers both
`opcd` and `opcd_offpolicy`), so adding an algorithm is one file plus one line here. A plugin declares an entry point
in the `rlloop.recipes` group naming either a `Recipe` (registered under the entry point's name, which should be the
recipe's name) or a module whose import calls `register_recipe`.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import entry_points
from pathlib import Path
from typing import Any

from tasks.plugins import Registry, UnknownPluginError
from trainers.config import TrainerConfig
from trainers.result import TrainResult

BUILTIN_MODULES = (
    "trainers.algorithms.sft",
    "trainers.algorithms.grpo",
    "trainers.algorithms.dpo",
    "trainers.algorithms.opo",
    "trainers.algorithms.opcd",
    "trainers.algorithms.gad",
    "trainers.algorithms.coach",
    "trainers.algorithms.oel",
    "trainers.algorithms.rft",
)
GROUP = "rlloop.recipes"


@dataclass(frozen=True)
class Recipe:
    """A training algorithm: its name, a one-line description, its config class and what runs it."""

    name: str
    description: str
    config_class: type[TrainerConfig]
    run: Callable[[Any], TrainResult]  # takes an instance of `config_class`

    def parse_config(self, data: dict[str, Any]) -> TrainerConfig:
        """Validate a config dict (raises pydantic.ValidationError naming the bad field)."""
        return self.config_class.model_validate(data)


class UnknownRecipeError(UnknownPluginError):
    """A recipe name nobody registered (a KeyError, as the generic registry's error); the message lists the known
    ones."""


def _register_builtins() -> None:
    for module in BUILTIN_MODULES:
        importlib.import_module(module)


RECIPES: Registry[Recipe] = Registry(
    "recipe", GROUP, builtins=_register_builtins, hint="see `python -m trainers --list`"
)


def register_recipe(recipe: Recipe, *, replace: bool = False) -> Recipe:
    """Add a recipe; registering a different recipe under a taken name is an error unless `replace`."""
    return RECIPES.register(recipe.name, recipe, replace=replace, origin=recipe.run.__module__)


def list_recipes() -> list[Recipe]:
    """All known recipes, sorted by name."""
    return [RECIPES.get(name) for name in RECIPES.names()]


def recipe_problems() -> list[str]:
    """Recipe plugins that could not be loaded, each with its entry point and why."""
    return RECIPES.problems()


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`; UnknownRecipeError lists the known names otherwise."""
    try:
        return RECIPES.get(name)
    except UnknownPluginError:
        known = ", ".join(RECIPES.names()) or "none"
        raise UnknownRecipeError(
            f"unknown recipe {name!r}; known: {known} (see `python -m trainers --list`; "
            f"plugins add more through the {GROUP!r} entry point group)"
        ) from None


def _top_level_location(module: str) -> Path | None:
    top = sys.modules.get(module.split(".")[0])
    where = getattr(top, "__path__", None)
    if where:
        return Path(next(iter(where))).resolve()
    file = getattr(top, "__file__", None)
    return Path(file).resolve() if file else None


def plugin_files(name: str) -> list[Path]:
    """What a process must see to find the plugin recipe `name` through its entry point: the top-level package (or
    module file) of the entry point and of the recipe's code, and the metadata folder of each distribution declaring
    it. Empty for built-ins and for recipes registered in code; the trial request mounts these (agent/loop/trials.py)."""
    module = get_recipe(name).run.__module__
    own = module.split(".")[0] != __name__.split(".")[0]  # the recipe's code is the plugin's, not trainers'
    declaring = [
        ep
        for ep in entry_points(group=GROUP)
        if ep.name == name or (own and ep.module.split(".")[0] == module.split(".")[0])
    ]
    if not declaring:
        return []
    found = [_top_level_location(module) if own else None]
    for ep in declaring:
        dist_dir = getattr(ep.dist, "_path", None)  # a PathDistribution's *.dist-info folder
        found += [_top_level_location(ep.module), Path(dist_dir).resolve() if dist_dir else None]
    return list(dict.fromkeys(path for path in found if path is not None))
