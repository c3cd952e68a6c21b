"""Recipe registry: a name maps to a pydantic config class and a run function, like Inspect AI's registries.

Built-in recipes live in `trainers/algorithms/`: any module there that defines a module-level `RECIPE` is found on
first use, so adding an algorithm is adding a file. Code elsewhere can call `register_recipe`.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from trainers.config import TrainerConfig
from trainers.result import TrainResult


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


class UnknownRecipeError(KeyError):
    """A recipe name nobody registered; the message lists the known ones."""

    def __str__(self) -> str:
        return str(self.args[0])


_RECIPES: dict[str, Recipe] = {}
_DISCOVERED = False


def register_recipe(recipe: Recipe, *, replace: bool = False) -> Recipe:
    """Add a recipe; registering a different recipe under a taken name is an error unless `replace`."""
    existing = _RECIPES.get(recipe.name)
    if existing is not None and existing is not recipe and not replace:
        raise ValueError(f"recipe {recipe.name!r} is already registered; pass replace=True to override it")
    _RECIPES[recipe.name] = recipe
    return recipe


def _discover_builtins() -> None:
    global _DISCOVERED
    if _DISCOVERED:
        return
    import trainers.algorithms as algorithms

    for info in sorted(pkgutil.iter_modules(algorithms.__path__), key=lambda m: m.name):
        if info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{algorithms.__name__}.{info.name}")
        recipe = getattr(module, "RECIPE", None)
        if isinstance(recipe, Recipe) and recipe.name not in _RECIPES:
            register_recipe(recipe)
    _DISCOVERED = True


def list_recipes() -> list[Recipe]:
    """All known recipes, sorted by name."""
    _discover_builtins()
    return [_RECIPES[name] for name in sorted(_RECIPES)]


def get_recipe(name: str) -> Recipe:
    """The recipe called `name`; UnknownRecipeError lists the known names otherwise."""
    _discover_builtins()
    try:
        return _RECIPES[name]
    except KeyError:
        known = ", ".join(sorted(_RECIPES)) or "none"
        raise UnknownRecipeError(
            f"unknown recipe {name!r}; known: {known} (see `python -m trainers --list`)"
        ) from None
