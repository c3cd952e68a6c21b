"""The trainer library as the driver model sees it: recipe names, their config fields, and a validator.

Recipes come from `trainers.registry` (`list_recipes()`, `get_recipe(name)`) when it is installed; otherwise only
the names the loop passes in `ProposalContext.recipes` are known and hyperparameter names go unchecked.
"""

from __future__ import annotations

import difflib
import importlib
import logging
import types
import typing
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ValidationError

from agent.proposers.proposal_paths import (
    LOOP_OWNED_FIELDS,  # fields the loop fills in; a proposal must not set them
)

logger = logging.getLogger(__name__)

_PLACEHOLDER = "__set_by_the_loop__"


def _type_name(annotation: Any) -> str:
    if annotation is None or annotation is type(None):
        return "None"
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        return " | ".join(_type_name(arg) for arg in typing.get_args(annotation))
    if origin is not None:
        args = ", ".join(_type_name(arg) for arg in typing.get_args(annotation))
        return f"{getattr(origin, '__name__', str(origin))}[{args}]"
    return getattr(annotation, "__name__", str(annotation))


def _config_class(entry: Any) -> type[BaseModel] | None:
    """A registry entry is a config class, or an object carrying one (config_class / config_cls / config)."""
    candidates = [entry] + [getattr(entry, attr, None) for attr in ("config_class", "config_cls", "config")]
    for candidate in candidates:
        if isinstance(candidate, type) and issubclass(candidate, BaseModel):
            return candidate
    return None


class RecipeCatalog:
    """Recipe name -> config class (None when only the name is known)."""

    def __init__(self, recipes: Mapping[str, type[BaseModel] | None]) -> None:
        self.recipes = dict(recipes)

    @classmethod
    def from_registry(cls, names: Iterable[str] = ()) -> RecipeCatalog:
        """The installed `trainers.registry`, limited to `names` when given; names alone if it is missing."""
        wanted = list(names)
        try:
            registry = importlib.import_module("trainers.registry")
        except ImportError:
            logger.info("trainers.registry is not available; recipe hyperparameters are not checked")
            return cls(dict.fromkeys(wanted))
        available = [r if isinstance(r, str) else str(getattr(r, "name", r)) for r in registry.list_recipes()]
        recipes: dict[str, type[BaseModel] | None] = {}
        for name in wanted or available:
            try:
                recipes[name] = _config_class(registry.get_recipe(name)) if name in available else None
            except Exception as exc:  # a broken recipe must not take the proposer down with it
                logger.warning("trainers.registry.get_recipe(%r) failed: %s", name, exc)
                recipes[name] = None
        return cls(recipes)

    def names(self) -> list[str]:
        return sorted(self.recipes)

    def settable_fields(self, recipe: str) -> dict[str, Any] | None:
        """Field name -> pydantic FieldInfo for the fields a proposal may set; None when unknown."""
        config = self.recipes.get(recipe)
        if config is None:
            return None
        return {name: info for name, info in config.model_fields.items() if name not in LOOP_OWNED_FIELDS}

    def render(self) -> str:
        """The library's API for the prompt: each recipe and its settable fields with type and default."""
        if not self.recipes:
            return "(no recipe list available: propose a train_py, or a recipe you know exists)"
        lines = [
            "Run as `python -m trainers <recipe> --config FILE`; `hyperparameters` are fields of its config."
        ]
        lines.append(f"Set by the loop, never in hyperparameters: {', '.join(sorted(LOOP_OWNED_FIELDS))}.")
        lines.append(
            "Path fields (*_file, *_path, *_dir) may name only what the trial sees, relative to /workspace or "
            "absolute: data/train.jsonl, data/valid.jsonl (a model field may also be /model, the checkpoint it "
            "starts from, or /base, the base model)."
        )
        for name in self.names():
            config = self.recipes[name]
            fields = self.settable_fields(name)
            if config is None or fields is None:
                lines.append(f"- recipe `{name}` (config fields not available)")
                continue
            doc = " ".join((config.__doc__ or "").split())
            lines.append(f"- recipe `{name}` ({config.__name__})" + (f": {doc}" if doc else ""))
            for field, info in fields.items():
                default = (
                    "required"
                    if info.is_required()
                    else f"default {info.get_default(call_default_factory=True)!r}"
                )
                desc = f" - {info.description}" if info.description else ""
                lines.append(f"    {field}: {_type_name(info.annotation)} ({default}){desc}")
        return "\n".join(lines)

    def validate(self, recipe: str, hyperparameters: Mapping[str, Any]) -> list[str]:
        """Problems with a recipe choice and its hyperparameters, one line each; empty when it is fine."""
        if self.recipes and recipe not in self.recipes:
            close = difflib.get_close_matches(recipe, self.names(), n=1)
            hint = f" (did you mean {close[0]!r}?)" if close else ""
            return [f"unknown recipe {recipe!r}{hint}; choose one of: {', '.join(self.names())}"]
        fields = self.settable_fields(recipe)
        if fields is None:
            return []
        errors: list[str] = []
        for key in hyperparameters:
            if key in LOOP_OWNED_FIELDS:
                errors.append(f"hyperparameter {key!r} is set by the loop; remove it")
            elif key not in fields:
                close = difflib.get_close_matches(key, list(fields), n=1)
                hint = f" (did you mean {close[0]!r}?)" if close else ""
                errors.append(f"hyperparameter {key!r} is not a field of recipe {recipe!r}{hint}")
        if errors:
            return errors + [f"fields of {recipe!r}: {', '.join(fields)}"]
        config = self.recipes[recipe]
        assert config is not None
        placeholders = {name: _PLACEHOLDER for name in LOOP_OWNED_FIELDS if name in config.model_fields}
        try:
            config.model_validate({**placeholders, **hyperparameters})
        except ValidationError as exc:
            for error in exc.errors():
                field = str(error["loc"][0]) if error["loc"] else ""
                if field in hyperparameters:
                    errors.append(f"hyperparameter {field!r}={hyperparameters[field]!r}: {error['msg']}")
        return errors
