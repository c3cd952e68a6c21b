"""Which files a proposal may name: only what its trial sees (the run's workspace, its own folders, and for model
fields the start checkpoint and the base model).

A proposal's hyperparameters become the trial's config file. Left unchecked, a path field such as `gad.teacher_file`
could point at `<run>/grader/test.jsonl` and train on the hidden test set. A trial sees none of the host's paths
(sandbox.view), so such a path leads nowhere anyway; this check says so before anything is paid for. Every path a
proposal sets is taken the way the trainer will open it (relative to the trial's working directory, /workspace) and
judged lexically: it must land in the workspace, the trial's own folder or output, or (model fields) the start
checkpoint or the base model. Nothing on the host is looked up or followed. Fields the loop fills in itself (the
start checkpoint, the training data, the output folder, the benchmark) are closed: a proposal may not set them.

Path fields are found by type (`Path`, `Path | None`, `list[Path]`, paths inside nested models) and, so a recipe
that types them loosely is still covered, by name (`*_path`, `*_file`, `*_dir` and their plurals). The functions
here return problems, one line each, so the LLM proposer can send them back to the model and `agent.loop.trials` can
refuse the trial with them.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Iterator, Mapping
from pathlib import Path, PurePath
from typing import Any

from pydantic import BaseModel

from sandbox.view import FIXED, TrialView

# Config fields the loop fills in for every trial (agent.loop.trials.recipe_config); a proposal must not set them.
LOOP_OWNED_FIELDS = frozenset(
    {
        "model_path",
        "train_file",
        "output_dir",
        "benchmark",
        "prompt_format",
        "system_prompt",
        "reserved_seconds",
    }
)
_LOOP_OWNED_HINTS = {
    "model_path": "the checkpoint to start from: choose it with init_from (a trial id, or null for the base model)",
    "train_file": "always the workspace's data/train.jsonl",
    "output_dir": "always the trial's own /output",
    "benchmark": "always the run's benchmark",
    "prompt_format": "always the run's --prompt-format (what the grader scores with)",
    "system_prompt": "always the run's --system-prompt (what the grader scores with)",
    "reserved_seconds": "the seconds of max_seconds the loop keeps for validating the checkpoint",
}
_PATH_SUFFIXES = ("_path", "_file", "_dir", "_paths", "_files", "_dirs")
# Fields named like this hold a model folder, which may also be the run's base model (mounted read-only).
_MODEL_SUFFIXES = ("_path", "_paths")
ALLOWED = (
    "a trial sees only /workspace (data/train.jsonl, data/valid.jsonl, ...), its own /trial and /output, and, "
    "for model folders, /model (its start checkpoint) and /base (the base model)"
)


def is_path_name(name: str) -> bool:
    """A field whose name says it holds a path, whatever its declared type."""
    return name.endswith(_PATH_SUFFIXES)


def _is_model_name(name: str) -> bool:
    return name.endswith(_MODEL_SUFFIXES)


def _members(annotation: Any) -> list[Any]:
    """The annotation and, recursively, its type arguments (Optional, Union, list[...], Annotated, ...)."""
    out = [annotation]
    for arg in typing.get_args(annotation):
        out += _members(arg)
    return out


def mentions_path(annotation: Any) -> bool:
    """True when the annotation is a Path or contains one (Path | None, list[Path], dict[str, Path], ...)."""
    return any(isinstance(m, type) and issubclass(m, PurePath) for m in _members(annotation))


def _model_in(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation holds directly or through Optional/Union/list/dict, if any."""
    for member in _members(annotation):
        if isinstance(member, type) and issubclass(member, BaseModel):
            return member
    return None


def _direct_model(annotation: Any) -> type[BaseModel] | None:
    """The pydantic model an annotation is, alone or in a Union/Optional (not inside a container)."""
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    if typing.get_origin(annotation) in (typing.Union, types.UnionType, typing.Annotated):
        for arg in typing.get_args(annotation):
            found = _direct_model(arg)
            if found is not None:
                return found
    return None


def path_fields(config_class: type[BaseModel]) -> list[str]:
    """The top-level fields of a config that hold paths (by type, by name, or inside a nested model)."""
    found = []
    for name, info in config_class.model_fields.items():
        nested = _model_in(info.annotation)
        if (
            mentions_path(info.annotation)
            or is_path_name(name)
            or (nested is not None and path_fields(nested))
        ):
            found.append(name)
    return found


def _item_annotation(annotation: Any, *, mapping: bool) -> Any:
    """The annotation of a container's items: the value type of dict[K, V], the item type of list[T]."""
    origin = typing.get_origin(annotation)
    if origin in (typing.Union, types.UnionType):
        for arg in typing.get_args(annotation):
            if arg is not type(None):
                return _item_annotation(arg, mapping=mapping)
        return Any
    args = typing.get_args(annotation)
    if not args:
        return Any
    return args[-1] if mapping else args[0]


def path_values(
    value: Any, annotation: Any, name: str, where: str, pathish: bool = False
) -> Iterator[tuple[str, str, str]]:
    """(where, field name, path) for every path inside `value`, guided by the field's annotation and name.

    `value` is what a proposal sent (JSON: dicts, lists, strings) or an already validated pydantic model.
    """
    if value is None:
        return
    if isinstance(value, BaseModel):
        for field, info in type(value).model_fields.items():
            yield from path_values(getattr(value, field), info.annotation, field, f"{where}.{field}")
        return
    model = _direct_model(annotation)
    if model is not None and isinstance(value, Mapping):
        for key, item in value.items():
            # a key that is not a field fails validation; its value is still walked, so no path slips through
            sub = model.model_fields.get(str(key))
            yield from path_values(item, sub.annotation if sub else Any, str(key), f"{where}.{key}")
        return
    pathish = pathish or mentions_path(annotation) or is_path_name(name)
    if isinstance(value, Mapping):
        item_annotation = _item_annotation(annotation, mapping=True)
        for key, item in value.items():
            yield from path_values(item, item_annotation, str(key), f"{where}.{key}", pathish)
    elif isinstance(value, list | tuple | set | frozenset):
        item_annotation = _item_annotation(annotation, mapping=False)
        for i, item in enumerate(value):
            yield from path_values(item, item_annotation, name, f"{where}[{i}]", pathish)
    elif pathish and isinstance(value, str | PurePath):
        yield where, name, str(value)


def _inside(path: str, folder: str) -> bool:
    return path == folder or path.startswith(folder.rstrip(os.sep) + os.sep)


def resolve(value: str, workspace: Path) -> str:
    """Where the trainer will open `value`: relative to the working directory `workspace`, lexically (`..`
    collapsed; nothing on the host is looked up)."""
    if "\x00" in value:
        raise ValueError("embedded NUL byte")
    return os.path.normpath(os.path.join(workspace, value))


def path_problem(where: str, name: str, value: str, *, view: TrialView = FIXED) -> str | None:
    """Why this path may not be used, or None when the trial sees it: in its workspace, trial folder or output,
    or, for a model field, in its start checkpoint or the base model. `view`: the folders as the trial sees them."""
    try:
        real = resolve(value, view.workspace)
    except ValueError as exc:
        return f"{where}={value!r} is not a usable path ({exc}): {ALLOWED}"
    roots = [view.workspace, view.trial, view.output]
    if _is_model_name(name):
        roots += [view.model, view.base]
    if any(_inside(real, os.path.normpath(root)) for root in roots):
        return None
    shown = f"resolves to {real}, outside" if real != value else "lies outside"
    return f"{where}={value!r} {shown} what the trial sees: {ALLOWED}"


def closed_field_problems(
    hyperparameters: Mapping[str, Any], closed: frozenset[str] = LOOP_OWNED_FIELDS
) -> list[str]:
    """One line per loop-owned field the proposal tries to set."""
    return [
        f"hyperparameters.{key}={hyperparameters[key]!r}: {key} is set by the loop ({_LOOP_OWNED_HINTS.get(key, 'not settable')}); "
        f"a proposal may not set it: remove it"
        for key in hyperparameters
        if key in closed
    ]


def proposal_problems(
    hyperparameters: Mapping[str, Any],
    *,
    config_class: type[BaseModel] | None,
    view: TrialView = FIXED,
    check_closed: bool = True,
) -> list[str]:
    """Every closed field set and every path the trial cannot see in a proposal's hyperparameters, one per line.

    `config_class` is the recipe's config (path fields found by type and name); None for a `train_py` proposal,
    whose config.json is free-form (path fields found by name). `check_closed=False` leaves out the loop-owned
    fields, for a caller that reports those itself.
    """
    problems = closed_field_problems(hyperparameters) if check_closed else []
    fields = config_class.model_fields if config_class is not None else {}
    for key, value in hyperparameters.items():
        if key in LOOP_OWNED_FIELDS:
            continue
        info = fields.get(key)
        annotation = info.annotation if info is not None else Any
        for where, name, path in path_values(value, annotation, key, f"hyperparameters.{key}"):
            problem = path_problem(where, name, path, view=view)
            if problem is not None:
                problems.append(problem)
    return problems
