"""A trial against what it came from: its tree node, the hyperparameters it changed, its code's diff, the edit form.

Shared by the run page, the trial view and the approval card, so each shows a trial the same way. Inputs are the
loop's own records (the checkpointed TrialRecords, the recipe catalog the run wrote: `agent.service.recipes`, never a
trainer module); trial-written files go through `agent.service.trialfiles`.
"""

from __future__ import annotations

import difflib
import json
from pathlib import Path
from typing import Any, Literal

from agent.loop import policy_requires
from agent.proposers import LOOP_OWNED_FIELDS, is_path_name
from agent.service.page_schemas import (
    CodeView,
    FieldSpec,
    HyperparameterChange,
    NodeState,
    Scored,
    TreeNode,
)
from agent.service.recipes import RecipeView
from agent.service.trialfiles import CODE_BYTES, TrialFiles

BASE = "base"


def trial_state(trial: dict[str, Any]) -> NodeState:
    """graded (sent to the grader), kept back (trained, not submitted), failed, rejected, running or pending."""
    status = trial.get("status")
    if status == "succeeded":
        return (
            "graded"
            if trial.get("submission_id") is not None or trial.get("score") is not None
            else "kept back"
        )
    if status in ("failed", "skipped"):
        return "failed"
    if status == "rejected":
        return "rejected"
    if status == "running":
        return "running"
    return "pending"


def _scored(data: dict[str, Any] | None, prefix: str = "") -> Scored:
    data = data or {}
    return Scored(
        score=data.get(f"{prefix}score"),
        ci_low=data.get(f"{prefix}ci_low"),
        ci_high=data.get(f"{prefix}ci_high"),
        n=data.get(f"{prefix}n"),
    )


def trial_node(trial: dict[str, Any], best_trial_id: str | None, state: NodeState | None = None) -> TreeNode:
    proposal = trial.get("proposal") or {}
    found = state or trial_state(trial)
    grading = trial.get("grading") or {}
    note = trial.get("error") if found in ("failed", "rejected") else trial.get("submission_note")
    return TreeNode(
        id=str(trial.get("trial_id")),
        parent=proposal.get("parent") or proposal.get("init_from") or BASE,
        operator=proposal.get("operator") or "draft",
        state=found,
        recipe=proposal.get("recipe"),
        hypothesis=str(proposal.get("hypothesis") or ""),
        valid=_scored(trial, "valid_"),
        public=Scored(
            score=trial.get("score"),
            ci_low=grading.get("ci_low"),
            ci_high=grading.get("ci_high"),
            n=grading.get("n"),
        ),
        best=best_trial_id is not None and trial.get("trial_id") == best_trial_id,
        note=str(note)[:500] if note else None,
    )


def base_node(state: dict[str, Any], scores: dict[str, Any]) -> TreeNode:
    baseline = scores.get("baseline") if isinstance(scores.get("baseline"), dict) else state.get("baseline")
    return TreeNode(
        id=BASE,
        parent=None,
        state="base",
        hypothesis="the base model",
        valid=_scored(state.get("baseline_valid")),
        public=_scored(baseline if isinstance(baseline, dict) else {"score": state.get("baseline_score")}),
        best=state.get("best_trial_id") is None and state.get("best_score") is not None,
    )


def changes(
    hyperparameters: dict[str, Any], parent: dict[str, Any] | None, recipe: str, recipes: RecipeView
) -> list[HyperparameterChange]:
    """Each hyperparameter with what it replaced: the parent's value when the parent set it, else the recipe's
    default. `parent`: the parent trial's proposal (same recipe), None from the base model."""
    same_recipe = parent is not None and parent.get("recipe") == recipe
    parent_hps = (parent or {}).get("hyperparameters") or {} if same_recipe else {}
    info = recipes.get(recipe)
    defaults = info.defaults if info is not None else {}
    out: list[HyperparameterChange] = []
    for name in sorted(set(hyperparameters) | set(parent_hps)):
        value = hyperparameters.get(name, defaults.get(name))
        source: Literal["parent", "recipe default", "new"]
        if name in parent_hps:
            replaced, source = parent_hps[name], "parent"
        elif name in defaults:
            replaced, source = defaults[name], "recipe default"
        else:
            replaced, source = None, "new"
        out.append(
            HyperparameterChange(
                name=name, value=value, replaced=replaced, replaced_from=source, changed=value != replaced
            )
        )
    return out


def _lines(hyperparameters: dict[str, Any]) -> list[str]:
    return [f"{name} = {json.dumps(value, default=str)}\n" for name, value in sorted(hyperparameters.items())]


def config_diff(hyperparameters: dict[str, Any], parent: dict[str, Any] | None, parent_id: str | None) -> str:
    """A unified diff of the hyperparameters against the parent's (the base model's: none)."""
    before = (parent or {}).get("hyperparameters") or {}
    label = f"{parent_id or BASE} hyperparameters"
    return "".join(difflib.unified_diff(_lines(before), _lines(hyperparameters), label, "proposed"))


def recipe_source(recipe: str, recipes: RecipeView) -> tuple[str, str]:
    """(file name, source) of the module that runs a recipe, as the run's catalog holds it; ("", "") when unknown."""
    info = recipes.get(recipe)
    return (info.source_name, info.source[:CODE_BYTES]) if info is not None else ("", "")


def code_view(
    proposal: dict[str, Any],
    parent: dict[str, Any] | None,
    parent_id: str | None,
    run_dir: Path,
    recipes: RecipeView,
) -> CodeView:
    """The code the trial runs and how it differs: its train.py against the parent's train.py (or the recipe's
    source when the parent ran a recipe); a recipe against the parent's recipe or train.py."""
    recipe = str(proposal.get("recipe") or "")
    train_py = proposal.get("train_py")
    parent_code: str | None = None
    parent_name = ""
    if parent is not None and parent_id:
        if parent.get("train_py"):
            parent_code = TrialFiles(run_dir, parent_id).train_py() or str(parent.get("train_py"))
            parent_name = f"{parent_id}/train.py"
        else:
            name, text = recipe_source(str(parent.get("recipe") or ""), recipes)
            parent_code, parent_name = text, f"{parent_id}: recipe {parent.get('recipe')} ({name})"
    if train_py:
        code = str(train_py)[:CODE_BYTES]
        if parent_code is None:
            name, parent_code = recipe_source(recipe, recipes)
            parent_name = f"recipe {recipe} ({name})" if name else f"recipe {recipe}"
        diff = "".join(
            difflib.unified_diff(
                parent_code.splitlines(keepends=True), code.splitlines(keepends=True), parent_name, "train.py"
            )
        )
        return CodeView(
            kind="train_py",
            source_name="train.py",
            against=parent_name,
            code=code,
            diff=diff,
            truncated=len(str(train_py)) > CODE_BYTES,
        )
    name, code = recipe_source(recipe, recipes)
    against = parent_name or f"recipe {recipe} ({name})"
    before = parent_code if parent_code is not None else code
    diff = "".join(
        difflib.unified_diff(before.splitlines(keepends=True), code.splitlines(keepends=True), against, name)
    )
    return CodeView(kind="recipe", source_name=name or recipe, against=against, code=code, diff=diff)


def asked_because(policy: str, proposal: dict[str, Any], budget_threshold_s: float) -> list[str]:
    """Which parts of the approval policy gate this proposal, in words."""
    from agent.core import Proposal

    try:
        parsed = Proposal.model_validate(proposal)
    except ValueError:
        return []
    reasons: list[str] = []
    for part in (p.strip() for p in policy.split(",")):
        if part and part != "never" and policy_requires(part, parsed, budget_threshold_s):
            reasons.append(
                {
                    "always": "always: every proposal waits for a person",
                    "code": "code: it runs its own training code",
                    "budget": f"budget: its estimated compute is over {budget_threshold_s:g}s",
                }.get(part, part)
            )
    return reasons


def estimated_compute_s(proposal: dict[str, Any], trial_seconds: float | None) -> float | None:
    """What the trial is expected to train for: the proposer's estimate, its max_seconds, or the run's per-trial
    seconds."""
    value = proposal.get("estimated_cost_s")
    if value is None:
        value = (proposal.get("hyperparameters") or {}).get("max_seconds")
    if value is None:
        value = trial_seconds
    try:
        return None if value is None else float(value)
    except (TypeError, ValueError):
        return None


def edit_problems(
    recipe: str, hyperparameters: dict[str, Any], edited: dict[str, Any], recipes: RecipeView
) -> list[str]:
    """What is wrong with an edit, judged by the recipe's config schema as the run's catalog holds it: one line per
    edited field that is unknown, of the wrong type or out of bounds. The loop validates the whole config with the
    recipe's own class again before the trial starts (cross-field rules too). Empty for a recipe without a schema."""
    info = recipes.get(recipe)
    if info is None or not info.config_schema.get("properties"):
        return []
    specs = {spec.name: spec for spec in field_specs(recipe, hyperparameters, recipes)}
    problems: list[str] = []
    for name, value in edited.items():
        spec = specs.get(name)
        if spec is None:
            owned = name in LOOP_OWNED_FIELDS or is_path_name(name)
            problems.append(
                f"{name}: set by the loop, not by a proposal"
                if owned
                else f"{name}: {recipe} has no such hyperparameter (see `python -m trainers --list`)"
            )
            continue
        problem = value_problem(spec, value)
        if problem:
            problems.append(f"{name}: {problem}")
    return problems


def value_problem(spec: FieldSpec, value: Any) -> str | None:
    """Why `value` does not fit a form field's schema (type, choices, bounds), or None; the page checks the same."""
    if value is None:
        return None if spec.nullable else "a value is needed (it cannot be null)"
    if spec.type == "json":
        return None
    if spec.type == "boolean":
        return None if isinstance(value, bool) else f"true or false is needed, got {value!r}"
    if spec.type == "string":
        return None if isinstance(value, str) else f"a string is needed, got {value!r}"
    if spec.type == "enum":
        return None if value in spec.choices else f"one of {', '.join(map(repr, spec.choices))} is needed"
    is_number = isinstance(value, int | float) and not isinstance(value, bool)
    if spec.type == "integer" and not (is_number and float(value).is_integer()):
        return f"an integer is needed, got {value!r}"
    if not is_number:
        return f"a number is needed, got {value!r}"
    for bound, fails, words in (
        (spec.minimum, lambda b: value < b, "at least"),
        (spec.maximum, lambda b: value > b, "at most"),
        (spec.exclusive_minimum, lambda b: value <= b, "above"),
        (spec.exclusive_maximum, lambda b: value >= b, "below"),
    ):
        if bound is not None and fails(bound):
            return f"{words} {bound:g} is needed, got {value!r}"
    return None


def _field_type(prop: dict[str, Any]) -> tuple[str, bool, list[Any]]:
    options = prop.get("anyOf") or [prop]
    nullable = any(o.get("type") == "null" for o in options)
    real = [o for o in options if o.get("type") != "null"]
    if len(real) != 1:
        return "json", nullable, []
    only = real[0]
    if "enum" in only:
        return "enum", nullable, list(only["enum"])
    if "const" in only:
        return "enum", nullable, [only["const"]]
    kind = only.get("type")
    if kind in ("number", "integer", "boolean", "string"):
        return str(kind), nullable, []
    return "json", nullable, []


def field_specs(recipe: str, hyperparameters: dict[str, Any], recipes: RecipeView) -> list[FieldSpec]:
    """The edit form's fields from the recipe's config schema: the proposed ones first, then every other field a
    proposal may set (never the loop's own fields nor paths). A recipe without a schema gets one JSON field per
    hyperparameter."""
    info = recipes.get(recipe)
    schema = info.config_schema if info is not None else {}
    props: dict[str, Any] = schema.get("properties") or {}
    specs: list[FieldSpec] = []
    for name in [*hyperparameters, *(n for n in props if n not in hyperparameters)]:
        if name in LOOP_OWNED_FIELDS or is_path_name(name):
            continue
        prop = props.get(name) or {}
        kind, nullable, choices = _field_type(prop) if prop else ("json", True, [])
        bounds = prop.get("anyOf", [prop])
        bound = next((b for b in bounds if b.get("type") not in (None, "null")), prop)
        specs.append(
            FieldSpec(
                name=name,
                type=kind,  # type: ignore[arg-type]
                value=hyperparameters.get(name, prop.get("default")),
                proposed=name in hyperparameters,
                default=prop.get("default"),
                minimum=bound.get("minimum"),
                maximum=bound.get("maximum"),
                exclusive_minimum=bound.get("exclusiveMinimum"),
                exclusive_maximum=bound.get("exclusiveMaximum"),
                choices=choices,
                nullable=nullable,
                description=str(prop.get("description") or ""),
            )
        )
    return specs
