"""`python -m trainers <recipe> --config FILE`: run one recipe from a JSON config; `--list` shows the recipes.

Exit codes: 0 done, 2 bad input (unknown recipe, unreadable or invalid config, unusable data or model path) with one
line on stderr saying what to fix, 1 anything that broke during training (with its traceback).
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from trainers.algorithms.coach import CoachReplyError
from trainers.data import DataFileError
from trainers.device import DeviceChoiceError
from trainers.registry import UnknownRecipeError, get_recipe, list_recipes, recipe_problems
from trainers.result import TrainerSetupError
from trainers.schedule import TRIAL_STARTED_ENV, process_started_at

EXIT_BAD_INPUT = 2


def _fail(message: str) -> int:
    print(f"error: {message}", file=sys.stderr, flush=True)
    return EXIT_BAD_INPUT


def describe_validation_error(error: ValidationError, config_path: Path) -> str:
    """One line naming the first bad field and what was wrong with it."""
    first = error.errors()[0]
    field = ".".join(str(part) for part in first["loc"]) or "(config)"
    extra = f" ({error.error_count() - 1} more problem(s))" if error.error_count() > 1 else ""
    if first["type"] == "extra_forbidden":
        return f"{config_path}: unknown field {field!r}; check the spelling against `python -m trainers --list`{extra}"
    return f"{config_path}: field {field!r}: {first['msg']}{extra}"


def _read_config(path: Path) -> dict[str, Any] | str:
    try:
        data = json.loads(path.read_text())
    except FileNotFoundError:
        return f"config file {path} does not exist"
    except json.JSONDecodeError as exc:
        return f"{path}: not valid JSON (line {exc.lineno}: {exc.msg})"
    if not isinstance(data, dict):
        return f"{path}: the config must be a JSON object of field: value"
    return data


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m trainers", description="Run a training recipe.")
    parser.add_argument("recipe", nargs="?", help="recipe name, e.g. sft or grpo")
    parser.add_argument("--config", type=Path, help="JSON file holding the recipe's config")
    parser.add_argument("--list", action="store_true", help="list the recipes and exit")
    args = parser.parse_args(argv)

    if args.list:
        for recipe in list_recipes():
            print(f"{recipe.name:<10} {recipe.description}")
        for problem in recipe_problems():  # a broken plugin is skipped, and said so
            print(f"warning: {problem}", file=sys.stderr)
        return 0
    if not args.recipe or args.config is None:
        return _fail("give a recipe and a config: python -m trainers <recipe> --config FILE (or --list)")
    try:
        recipe = get_recipe(args.recipe)
    except UnknownRecipeError as exc:
        return _fail(str(exc))
    data = _read_config(args.config)
    if isinstance(data, str):
        return _fail(data)
    try:
        config = recipe.parse_config(data)
    except ValidationError as exc:
        return _fail(describe_validation_error(exc, args.config))
    # the trial's clock: from the host's launch when it gave one, else from this process's start (imports count)
    os.environ.setdefault(TRIAL_STARTED_ENV, f"{process_started_at():.3f}")
    try:
        recipe.run(config)
    except (DataFileError, FileNotFoundError, TrainerSetupError, CoachReplyError, DeviceChoiceError) as exc:
        return _fail(str(exc))
    return 0


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(
        code
    )  # metrics.json is written last and closed: skip the interpreter's teardown (1-3 s with torch)
