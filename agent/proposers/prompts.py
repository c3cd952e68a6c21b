"""The driver model's prompts. Built only from `ProposalContext` (which never holds hidden test data)."""

from __future__ import annotations

import json
from typing import Any

from agent.core import Proposal, ProposalContext
from agent.llm import Budget
from agent.proposers.recipes import RecipeCatalog
from agent.proposers.trial_tree import render_trial_tree

MAX_FAILURE_CHARS = 6000
MAX_ECHO_CHARS = 4000

SYSTEM_PROMPT = """\
You are the research driver of rlloop. You improve a language model's score on a benchmark by proposing one \
training experiment (a trial) at a time. A trial runs a trainer recipe with hyperparameters, starting from the base \
model or from an earlier successful trial's checkpoint (init_from = that trial_id). Alternatively a trial may supply \
a complete Python training script (train_py) that writes a Hugging Face checkpoint. A grader scores each checkpoint on \
a hidden test set you never see; train on the workspace data (data/train.jsonl, data/valid.jsonl) only.
A train_py runs in a sandbox with no network, its working directory /workspace (read-only), and these environment variables: MODEL_PATH (the checkpoint to start from, read-only), DATA_PATH (the folder with train.jsonl and valid.jsonl, one {{"id","prompt","answer"}} object a line), OUTPUT_DIR (its only writable folder: save the final model and tokenizer there with save_pretrained, safetensors, as real files, not links; scratch goes there or in /tmp), and RLLOOP_SMOKE=1 during a smoke run that must train a few steps on a few examples, save, and exit 0. It may import the trainer library (`trainers`) or TRL, transformers and torch directly.

Reply with exactly one JSON object and nothing else, with these keys:
{schema}"""


def proposal_schema(recipes: list[str]) -> dict[str, Any]:
    """Proposal's JSON schema, with `recipe` narrowed to the known names when there are any."""
    schema = Proposal.model_json_schema()
    if recipes:
        schema["properties"]["recipe"]["enum"] = recipes
    return schema


def _schema_summary() -> str:
    lines = []
    for name, info in Proposal.model_fields.items():
        need = "required" if info.is_required() else "optional"
        lines.append(f'  "{name}" ({need}): {info.description or ""}')
    return "\n".join(lines)


def system_prompt() -> str:
    return SYSTEM_PROMPT.format(schema=_schema_summary())


def _seconds(value: float) -> str:
    return f"{value:.0f}s ({value / 60:.1f} min)"


def _score(value: float | None) -> str:
    return "not scored" if value is None else f"{value:.4f}"


TOOLS_NOTE = """
Before you answer you may call tools (at most {calls} calls in all) to look at the data splits, a trial's \
per-sample validation results and failure clusters, a trial's log and metrics, a recipe's source, or to run a short \
script in the sandbox (its seconds count against the compute budget). Look before you leap, but stay brief: when you \
know enough, reply with the JSON proposal only."""


def tools_note(max_calls: int) -> str:
    """Appended to the system prompt when tools are offered."""
    return TOOLS_NOTE.format(calls=max_calls)


def tool_budget_spent(max_calls: int) -> str:
    return (
        f"You have used all {max_calls} tool calls of this proposal. No more tools: reply now with the JSON "
        "proposal only."
    )


TRIAL_TIME_NOTE = (
    "A trial's max_seconds is its whole wall budget, counted as the run counts it: start-up, loading, training, "
    "saving (the loop keeps back the seconds it needs to validate the checkpoint). Without max_steps the trial trains "
    "until those seconds are spent, and its learning-rate schedule (lr_scheduler_type, warmup_ratio, cooldown_ratio, "
    "min_lr_ratio) follows the trial's own time: a time-boxed linear or cosine schedule ends near zero, constant with "
    "a cooldown_ratio warms up, holds, then cools down. Each trial's metrics say how far its schedule got "
    "(schedule_progress, lr_last). One long trial anneals once; several short ones restart the schedule each time."
)


LINE_NOTE = (
    "A line costs what one run costs: continue a checkpoint with resume_optimizer true (Adam's moments carry on) "
    "and give each continued trial its part of one schedule, schedule_from and schedule_to (the second of four "
    "trials: 0.25 to 0.5), so the trials warm up once and decay once, as one run of their total length would."
)


def data_lines(context: ProposalContext) -> list[str]:
    """What the train rows call for (agent.proposers.data_moves), the route the built-in line policy would take on
    this budget, and how a line is continued: the same report the built-in policies act on."""
    from agent.proposers.data_moves import data_report
    from agent.proposers.lines import LineProposer, plan_for

    report = data_report(context.workspace, context.benchmark)
    lines = [
        f"- {move.why}: set {', '.join(f'{k}={json.dumps(v)}' for k, v in move.fields.items())}"
        for move in report.moves
    ]
    lines += [f"- {note}" for note in report.notes]
    if not lines:
        lines = ["- nothing: the labelled answers read are what the task scores"]
    units, per_trial = LineProposer.units(context)
    plan = plan_for(report, context.recipes or ["sft", "grpo"], units, per_trial)
    return [
        *lines,
        "Moves compose: where several are called for, set them together in one trial (each alone is only an "
        "ablation). A route's stages continue from each other's checkpoint (init_from).",
        f"The built-in line policy's route on this budget: {plan.text()}.",
        LINE_NOTE,
    ]


def compute_lines(context: ProposalContext) -> list[str]:
    """How the run's compute may be spent: per trial, in all, and what a trial's seconds cover."""
    lines = []
    if context.trial_seconds is not None:
        lines.append(f"Wall seconds per trial (--trial-seconds): {context.trial_seconds:g}")
    if context.compute_left_s is not None:
        lines.append(
            f"Trial compute left (--max-compute-s): {_seconds(context.compute_left_s)}; a trial may spend several "
            "trials' worth (max_seconds up to this), leaving fewer trials"
        )
    return [*lines, TRIAL_TIME_NOTE]


def model_default_lines(context: ProposalContext) -> list[str]:
    """The defaults that fit this base model where they differ from the library's (trainers.model_fit)."""
    changed = {recipe: fields for recipe, fields in context.recipe_defaults.items() if fields}
    if not changed:
        return []
    lines = [
        "Defaults for this base model, used for every field a proposal leaves unset (the library's defaults above "
        "were tuned on tiny models built from scratch and ruin a pretrained one):"
    ]
    lines += [
        f"- {recipe}: {', '.join(f'{k}={v!r}' for k, v in fields.items())}"
        for recipe, fields in changed.items()
    ]
    return lines


def proposal_prompt(
    context: ProposalContext,
    catalog: RecipeCatalog,
    budget: Budget | None = None,
    lessons: str | None = None,
    optimizer: str | None = None,
) -> str:
    """The user message for `propose`: task, budget left, the trainer library, the trial tree, feedback."""
    best = _score(context.best_score) + (f" (trial {context.best_trial_id})" if context.best_trial_id else "")
    submissions = "unlimited" if context.submissions_left is None else str(context.submissions_left)
    resumable = [t.trial_id for t in context.trials if t.status == "succeeded" or t.checkpoint]
    sections = [
        "# Task",
        f"Benchmark: {context.benchmark}",
        context.benchmark_description.strip(),
        f"Base model: {context.base_model}",
        f"Baseline score: {_score(context.baseline_score)}; best so far: {best}",
        "",
        "# Budget left",
        f"Trials left: {context.trials_left}",
        f"Time left: {_seconds(context.seconds_left)}",
        f"Submissions left: {submissions}",
        *compute_lines(context),
    ]
    if budget is not None:
        sections.append(f"Spent so far: {budget.summary()}")
    sections += ["", "# What the train rows call for (read from data/train.jsonl)", *data_lines(context)]
    sections += [
        "",
        "# Trainer library",
        catalog.render(),
        *model_default_lines(context),
        "",
        "# Trials so far (a child continued from its parent's checkpoint)",
        render_trial_tree(context.trials, context.base_model, context.baseline_score, context.best_trial_id),
        "",
        "Checkpoints you may continue from (init_from): "
        + (", ".join(resumable) if resumable else "none yet"),
    ]
    if lessons:
        sections += [
            "",
            "# Lessons from earlier runs on this benchmark and base model (memory)",
            lessons.strip(),
        ]
    if optimizer:
        sections += ["", "# A numeric optimizer's view of these trials", optimizer.strip()]
    if context.feedback:
        sections += ["", "# Feedback on your previous proposal (from a person)", context.feedback.strip()]
    sections += [
        "",
        "# Your move",
        "Propose the next trial. Build on what scored best, avoid repeating what failed, and fit it in the time "
        "left (estimated_cost_s in seconds). Reply with the JSON object only.",
    ]
    return "\n".join(sections)


def repair_prompt(proposal: Proposal, failure: str) -> str:
    """The user message for `repair`: the failing proposal and what went wrong (traceback, log tail)."""
    failure_text = failure if len(failure) <= MAX_FAILURE_CHARS else "...\n" + failure[-MAX_FAILURE_CHARS:]
    return "\n".join(
        [
            "# Repair a failed trial",
            "This proposal failed before it could train. Fix it: correct train_py (keep it a complete script) or "
            "the hyperparameters, changing nothing the failure does not require.",
            "",
            "## Failure (error, traceback, log tail)",
            failure_text.strip(),
            "",
            "## The proposal that failed (JSON)",
            json.dumps(proposal.model_dump(mode="json"), indent=2),
            "",
            "Reply with the full corrected proposal as one JSON object only.",
        ]
    )


def rejection_message(errors: list[str]) -> str:
    """The feedback turn after a malformed answer: every problem, and what to send instead."""
    listed = "\n".join(f"- {error}" for error in errors)
    return f"Your reply was rejected:\n{listed}\nReply again with one JSON object that fixes all of these."


def echo(content: str) -> str:
    """The rejected answer as it is replayed to the model (clipped: it may be huge)."""
    return content if len(content) <= MAX_ECHO_CHARS else content[:MAX_ECHO_CHARS] + "\n...(truncated)"
