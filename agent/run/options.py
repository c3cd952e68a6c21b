"""`rlloop run`'s options, derived from RunConfig: one flag per field (`loop_n` -> `--loop-n`), its help the field's
description. A new RunConfig field is a new flag with no edit here.

Every flag is read as text (booleans are switches) and handed to RunConfig unparsed, so the CLI accepts and refuses
exactly what the config file, the service and a sweep's `run_overrides` do, with RunConfig's message."""

from __future__ import annotations

import inspect
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal, Union, get_args, get_origin

import typer
from pydantic.fields import FieldInfo

from agent.run.config import RunConfig, is_duration
from tasks.plugins import Registry

# Flags a field answers to besides its own name (scripts and the README use them).
EXTRA_FLAGS: dict[str, tuple[str, ...]] = {"ray_address": ("--ray",)}
METAVARS: dict[Any, str] = {int: "<int>", float: "<float>", Path: "<path>"}  # typer's own style
DURATION_HELP = "Seconds, or a duration such as 90s, 20m, 1.5h."


def flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _base_type(annotation: Any) -> Any:
    """`int | None` -> int; `Literal[...]` -> str."""
    if get_origin(annotation) in (Union, types.UnionType):
        annotation = next(arg for arg in get_args(annotation) if arg is not type(None))
    return str if get_origin(annotation) is Literal else annotation


def _registered() -> dict[str, Registry[Any]]:
    """Fields whose help lists the names registered now (built-ins and plugins)."""
    from agent.run.plugins import PROPOSERS
    from sandbox.registry import SANDBOXES

    return {"sandbox": SANDBOXES, "proposer": PROPOSERS}


def field_help(name: str, info: FieldInfo) -> str:
    """A field's description, with the duration rule for `Duration` fields and the registered names for fields that
    name an extension."""
    text = info.description or ""
    registry = _registered().get(name)
    if registry is not None:
        text += f" Registered: {', '.join(registry.names()) or 'none'}."
    return f"{text} {DURATION_HELP}".strip() if is_duration(info) else text


def _option(name: str, info: FieldInfo) -> inspect.Parameter:
    kind = _base_type(info.annotation)
    decls = (flag_name(name), *EXTRA_FLAGS.get(name, ()))
    if kind is bool:
        negative = "--no-" + name.replace("_", "-")
        option = typer.Option(None, f"{decls[0]}/{negative}", *decls[1:], help=field_help(name, info))
        return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=bool | None)
    metavar = "<duration>" if is_duration(info) else METAVARS.get(kind, "<str>")
    option = typer.Option(None, *decls, help=field_help(name, info), metavar=metavar, show_default=False)
    return inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=option, annotation=str | None)


def run_config_fields(*fields: str) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Add an option for each of these RunConfig fields to `command(<its own options>, **flags)` (typer reads the
    signature set here): a command that passes a few run settings on (`rlloop bench`) shows RunConfig's own."""

    def add(command: Callable[..., Any]) -> Callable[..., Any]:
        own = inspect.signature(command, eval_str=True).parameters.values()
        params = [p for p in own if p.kind is not inspect.Parameter.VAR_KEYWORD]
        params += [_option(name, RunConfig.model_fields[name]) for name in fields]
        command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
        return command

    return add


def run_config_options(command: Callable[..., Any]) -> Callable[..., Any]:
    """Give `command(config_file, **flags)` one option per RunConfig field plus `--config FILE`; typer reads the
    signature set here."""
    params = [_option(name, info) for name, info in RunConfig.model_fields.items()]
    params.append(
        inspect.Parameter(
            "config_file",
            inspect.Parameter.KEYWORD_ONLY,
            default=typer.Option(None, "--config", help="YAML or JSON file of the same fields."),
            annotation=str | None,
        )
    )
    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    return command
