"""The recipes described as data: each one's config schema, defaults and source, for readers that must not import a
trainer (the service's pages: importing the recipes imports torch, TRL and transformers, 15 s on a loaded machine).

A research run writes the catalog into its folder when it starts (`write_catalog`, run_dir/recipes.json), so its
pages show the recipes as that run ran them; `python -m trainers.catalog OUT` writes the same for a run made before
the file existed. Importing this module imports no recipe: `describe_recipes` does, when called.
"""

from __future__ import annotations

import argparse
import inspect
import sys
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field

from tasks.atomic import atomic_write_text

CATALOG_NAME = "recipes.json"
SOURCE_BYTES = 256 * 1024


class RecipeInfo(BaseModel):
    """One recipe as data: enough to show what a trial changed, its code, and an edit form."""

    name: str
    description: str = ""
    config_schema: dict[str, Any] = Field(
        default_factory=dict, description="The config class's JSON schema (pydantic's)."
    )
    defaults: dict[str, Any] = Field(
        default_factory=dict, description="Every optional field's default that is a plain value."
    )
    source_name: str = Field(default="", description="The file name of the module that runs it.")
    source: str = Field(default="", description="That module's text (the first SOURCE_BYTES).")


class RecipeCatalog(BaseModel):
    """Every recipe a process could run, with the problems of plugins that could not be loaded."""

    recipes: dict[str, RecipeInfo] = Field(default_factory=dict)
    problems: list[str] = Field(default_factory=list)


def describe(recipe: Any) -> RecipeInfo:
    """A registered `trainers.registry.Recipe` as data."""
    config_class = recipe.config_class
    defaults = {
        name: info.default
        for name, info in config_class.model_fields.items()
        if not info.is_required() and isinstance(info.default, int | float | str | bool | None)
    }
    source_name, source = "", ""
    try:
        module = inspect.getmodule(recipe.run)
        path = inspect.getsourcefile(module) if module else None
        if path:
            source_name, source = Path(path).name, Path(path).read_text()[:SOURCE_BYTES]
    except (OSError, TypeError):  # a plugin without source: the page says there is none
        pass
    return RecipeInfo(
        name=recipe.name,
        description=recipe.description,
        config_schema=config_class.model_json_schema(),
        defaults=defaults,
        source_name=source_name,
        source=source,
    )


def describe_recipes() -> RecipeCatalog:
    """Every recipe this process can load (built-ins and plugins), described."""
    from trainers.registry import list_recipes, recipe_problems

    return RecipeCatalog(
        recipes={r.name: describe(r) for r in list_recipes()}, problems=list(recipe_problems())
    )


def write_catalog(path: Path) -> RecipeCatalog:
    """Describe the recipes into `path`, atomically."""
    catalog = describe_recipes()
    atomic_write_text(path, catalog.model_dump_json())
    return catalog


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers.catalog", description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="where to write the catalog (JSON)")
    args = parser.parse_args(argv)
    catalog = write_catalog(args.out)
    print(f"{len(catalog.recipes)} recipes described into {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
