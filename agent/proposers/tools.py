"""What the driver model may look at, and try, before it proposes a trial: a small registry of typed tools.

Each tool has pydantic parameters (their JSON schema is what OpenAI tool calling sends) and returns text for the
model plus a one-line summary for the run log, the trial's `proposal_tools.jsonl` and its MLflow trace. Tools only
read the run's workspace (data splits), the host's records of trials (logs, metrics, `validation.json`: written by
the host, outside every trial's reach) and the trainer registry, or run a short script in the run's sandbox
(network none, a time limit, its seconds counted against the compute budget), so they never see the hidden test
set. Every file is read through `sandbox.untrusted` (no link followed, no FIFO opened, a size cap), and the run's
secrets are blanked from every result before the model reads it. A tool that fails returns its error as text: the
model reads it, the run goes on.
"""

from __future__ import annotations

import collections
import importlib
import inspect
import json
import re
import statistics
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from agent.proposers.failures import answer_pattern, failure_clusters
from sandbox import untrusted
from tasks.plugins import Registry

if TYPE_CHECKING:
    from agent.core import TrialRecord
    from agent.llm import Budget
    from agent.proposers.base import RunsScripts, RunView
    from agent.run import RunPaths

MAX_RESULT_CHARS = 6000  # what one tool result may put in the prompt
MAX_SOURCE_CHARS = 12000
_TRIAL_ID = re.compile(r"^[A-Za-z0-9_.-]+$")


class ToolFailure(Exception):
    """A tool could not do what was asked; the message goes back to the model as the tool's result."""


@dataclass
class ToolEnv:
    """What tools may reach: the run's workspace, trials, sandbox and budget (None where a caller has none)."""

    workspace: Path
    trials: list[TrialRecord] = field(default_factory=list)
    trials_dir: Path | None = None  # the host's trial records; beside the workspace (RunPaths) when None
    paths: RunPaths | None = None
    scripts: RunsScripts | None = (
        None  # runs `run_script`'s code in the run's sandbox (handed in by the loop)
    )
    budget: Budget | None = None
    base_model: Path | None = None
    trial_id: str = "t00"  # the trial being proposed: its scripts run in trials/<trial_id>-script<n>
    script_timeout_s: float = 60.0
    script_memory_mb: int = 2048
    scripts_run: int = 0
    scripts_off: str | None = None  # why run_script is not offered (e.g. the approval policy gates code)
    secrets: tuple[str, ...] = ()  # blanked from every result (the grader's token), whatever a file held

    @classmethod
    def from_run(cls, run: RunView, trial_id: str, trials: list[TrialRecord]) -> ToolEnv:
        """The environment of a running loop (`agent.loop.resources.RunResources`), for the trial being proposed."""
        return cls(
            workspace=run.paths.workspace,
            trials=trials,
            trials_dir=run.paths.trials_dir,
            paths=run.paths,
            scripts=run.scripts,
            budget=run.budget,
            base_model=run.base_model,
            trial_id=trial_id,
            script_timeout_s=run.config.llm_script_timeout,
            script_memory_mb=min(run.config.trial_memory_mb, 4096),
            scripts_off=_scripts_off(run.config.approval),
            secrets=run.secrets(),  # the grader's token: a trial never sees it; a result is blanked anyway
        )

    def tool_names(self) -> list[str]:
        """The tools this environment offers."""
        return [
            n for n in TOOLS.names() if not (n == "run_script" and (self.scripts_off or self.scripts is None))
        ]

    def data_file(self, split: str) -> Path:
        return self.workspace / "data" / f"{split}.jsonl"

    @property
    def records(self) -> Path:
        """Where the host keeps its records of trials."""
        return self.trials_dir or self.workspace.parent / "trials"

    def trial_dir(self, trial_id: str) -> Path:
        if not _TRIAL_ID.match(trial_id) or trial_id.startswith("."):
            raise ToolFailure(f"{trial_id!r} is not a trial id; use one of: {self.trial_ids()}")
        return self.records / trial_id

    def record_dir(self, trial_id: str) -> Path:
        """The host's record folder of `trial_id`, made if missing (refused if a link stands in its way)."""
        return untrusted.host_dir(self.trial_dir(trial_id), anchor=self.records.parent)

    def read(self, trial_id: str, name: str, *, max_bytes: int = untrusted.MAX_TEXT_BYTES) -> str:
        """A file of a trial's record, read without following links; ToolFailure when it is not there."""
        try:
            return untrusted.read_text(self.records, f"{trial_id}/{name}", max_bytes=max_bytes)
        except FileNotFoundError:
            raise ToolFailure(f"trial {trial_id} has no {name}; trials: {self.trial_ids()}") from None
        except OSError as exc:
            raise ToolFailure(f"trial {trial_id}'s {name} cannot be read: {exc}") from None

    def redact(self, text: str) -> str:
        for secret in self.secrets:
            if secret:
                text = text.replace(secret, "[redacted]")
        return text

    def trial_ids(self) -> str:
        return ", ".join(t.trial_id for t in self.trials) or "none yet"


@dataclass(frozen=True)
class ToolOutput:
    text: str  # what the model reads
    summary: str  # one line for logs and traces


@dataclass(frozen=True)
class Tool:
    """One function the model may call: typed parameters, a description it reads, and the code that answers."""

    name: str
    description: str
    params: type[BaseModel]
    run: Callable[[ToolEnv, Any], ToolOutput]
    max_chars: int = MAX_RESULT_CHARS  # of its result, as the model reads it

    def spec(self) -> dict[str, Any]:
        """The OpenAI `tools` entry."""
        schema = self.params.model_json_schema()
        schema.pop("title", None)
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": schema},
        }


class ToolCallRecord(BaseModel):
    """One call as a reviewer sees it: what was asked, what came back, how long it took."""

    call_id: str
    name: str
    arguments: dict[str, Any] | str
    ok: bool
    summary: str
    seconds: float
    result: str = ""  # the text the model read (clipped)


def _clip(text: str, limit: int = MAX_RESULT_CHARS) -> str:
    return (
        text
        if len(text) <= limit
        else text[:limit] + f"\n...(truncated, {len(text) - limit} more characters)"
    )


def _one_line(text: str, limit: int = 160) -> str:
    line = " ".join(text.split())
    return line if len(line) <= limit else line[: limit - 3] + "..."


def _read_jsonl(path: Path) -> list[dict[str, Any]]:
    try:
        text = untrusted.read_text(path.parent, path.name, max_bytes=256 * 1024 * 1024)
    except FileNotFoundError:
        raise ToolFailure(f"{path.name} does not exist in the workspace") from None
    rows = []
    for line in text.splitlines():
        if line.strip():
            rows.append(json.loads(line))
    return rows


# -- the tools ------------------------------------------------------------------------------------------------


class DataRowsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "valid"] = Field("train", description="Which workspace split to read.")
    offset: int = Field(0, ge=0, description="Index of the first row.")
    limit: int = Field(5, ge=1, le=50, description="How many rows (at most 50).")


def _data_rows(env: ToolEnv, args: DataRowsArgs) -> ToolOutput:
    rows = _read_jsonl(env.data_file(args.split))
    shown = rows[args.offset : args.offset + args.limit]
    text = "\n".join(json.dumps(row, ensure_ascii=False) for row in shown)
    header = f"{args.split}.jsonl rows {args.offset}..{args.offset + len(shown) - 1} of {len(rows)}:\n"
    return ToolOutput(header + text, f"{len(shown)} {args.split} rows from {args.offset} (of {len(rows)})")


class SplitStatsArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    split: Literal["train", "valid", "both"] = Field("both", description="Which workspace split(s).")


def _length_stats(values: list[int]) -> str:
    if not values:
        return "n/a"
    ordered = sorted(values)
    p90 = ordered[min(len(ordered) - 1, int(0.9 * len(ordered)))]
    return f"min {ordered[0]}, mean {statistics.fmean(values):.1f}, p90 {p90}, max {ordered[-1]}"


def _split_stats(env: ToolEnv, args: SplitStatsArgs) -> ToolOutput:
    splits = ["train", "valid"] if args.split == "both" else [args.split]
    lines, sizes = [], []
    for split in splits:
        rows = _read_jsonl(env.data_file(split))
        prompts = [len(str(r.get("prompt", ""))) for r in rows]
        answers = [len(str(r.get("answer", ""))) for r in rows]
        distinct = len({str(r.get("answer", "")) for r in rows})
        keys = sorted({k for r in rows for k in r})
        lines.append(
            f"{split}: {len(rows)} rows; fields {', '.join(keys)}; prompt chars {_length_stats(prompts)}; "
            f"answer chars {_length_stats(answers)}; {distinct} distinct answers"
        )
        sizes.append(f"{split} {len(rows)}")
    return ToolOutput("\n".join(lines), "sizes: " + ", ".join(sizes))


class TrialArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    trial_id: str = Field(description="A trial id from the trial tree, e.g. t01.")


class ValidationArgs(TrialArgs):
    limit: int = Field(10, ge=0, le=50, description="How many wrong answers to show.")


def _validation_results(env: ToolEnv, args: ValidationArgs) -> ToolOutput:
    env.trial_dir(args.trial_id)  # a trial id, or ToolFailure
    if not untrusted.is_file(env.records, f"{args.trial_id}/validation.json"):
        raise ToolFailure(
            f"trial {args.trial_id} has no validation results (no trials/{args.trial_id}/validation.json); "
            f"trials: {env.trial_ids()}"
        )
    from agent.core import Validation

    try:  # the host's own file, read back only in its own shape
        data = Validation.model_validate_json(env.read(args.trial_id, "validation.json")).model_dump()
    except ValueError:
        raise ToolFailure(f"trial {args.trial_id}'s validation.json is not a validation record") from None
    samples = list(data.get("samples") or [])
    wrong = [s for s in samples if not s.get("correct")]
    ci = (data.get("ci_low"), data.get("ci_high"))
    ci_text = f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" if None not in ci else ""
    lines = [
        f"trial {args.trial_id} on valid: score {float(data.get('score', 0.0)):.4f} (n={data.get('n', len(samples))}"
        f"{ci_text}); {len(wrong)} wrong of {len(samples)} kept samples",
        "failure clusters (kind: count, e.g. expected -> got):",
    ]
    for kind, count, members in failure_clusters(samples):
        example = members[0]
        lines.append(f"- {kind}: {count}, e.g. {example.get('expected')!r} -> {example.get('got')!r}")
    patterns = collections.Counter(answer_pattern(str(s.get("got", ""))) for s in wrong)
    if patterns:
        lines.append(
            "wrong answers by shape: " + ", ".join(f"{p!r} x{n}" for p, n in patterns.most_common(5))
        )
    if args.limit:
        lines.append(f"first {min(args.limit, len(wrong))} wrong samples:")
        lines += [json.dumps(s, ensure_ascii=False) for s in wrong[: args.limit]]
    clusters = failure_clusters(samples)
    top = f", mostly {clusters[0][0]}" if clusters else ""
    return ToolOutput("\n".join(lines), f"{args.trial_id}: {len(wrong)}/{len(samples)} wrong{top}")


class TrialLogArgs(TrialArgs):
    lines: int = Field(60, ge=1, le=400, description="How many lines from the end of the log.")


def _trial_log(env: ToolEnv, args: TrialLogArgs) -> ToolOutput:
    env.trial_dir(args.trial_id)  # a trial id, or ToolFailure
    owner = args.trial_id.removesuffix("-smoke")  # a smoke run's log belongs to its trial
    record = next((t for t in env.trials if t.trial_id == owner), None)
    if record is None:  # not finished: a warm sandbox waiting for its go has a log that says only that
        raise ToolFailure(f"trial {args.trial_id} has no log yet (it has not run); trials: {env.trial_ids()}")
    try:  # the host's capture of the trial's output (never a file in the trial's own folder)
        text = untrusted.tail_text(env.records, f"{args.trial_id}/log.txt", max_bytes=256 * 1024)
    except FileNotFoundError:
        raise ToolFailure(f"trial {args.trial_id} has no log yet; trials: {env.trial_ids()}") from None
    except OSError as exc:
        raise ToolFailure(f"trial {args.trial_id}'s log cannot be read: {exc}") from None
    tail = text.splitlines()[-args.lines :]
    parts = [f"last {len(tail)} lines of trials/{args.trial_id}/log.txt:", *tail]
    if untrusted.is_file(env.records, f"{args.trial_id}/metrics.json"):  # the host's copy: numbers only
        parts += ["", "train metrics:", env.read(args.trial_id, "metrics.json", max_bytes=64 * 1024)[:3000]]
    if owner == args.trial_id:
        score = "not scored" if record.score is None else f"{record.score:.4f}"
        parts += [
            "",
            f"status {record.status}, score {score}, {record.duration_s:.0f}s, error: {record.error}",
        ]
    return ToolOutput("\n".join(parts), f"{args.trial_id}: {len(tail)} log lines")


class RecipeArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    recipe: str = Field(description="A recipe name from the trainer library, e.g. sft.")


def _recipe_source(env: ToolEnv, args: RecipeArgs) -> ToolOutput:
    registry = importlib.import_module("trainers.registry")
    try:
        recipe = registry.get_recipe(args.recipe)
    except KeyError as exc:
        raise ToolFailure(str(exc.args[0]) if exc.args else f"unknown recipe {args.recipe!r}") from None
    fields = recipe.config_class.model_json_schema().get("properties", {})
    schema = "\n".join(f"{name}: {json.dumps(spec, separators=(',', ':'))}" for name, spec in fields.items())
    run = getattr(recipe.run, "__wrapped__", recipe.run)
    try:
        module = inspect.getmodule(run)
        source = inspect.getsource(module) if module is not None else inspect.getsource(run)
        where = getattr(module, "__name__", "?")
    except (OSError, TypeError):
        source, where = "(source not available)", "?"
    text = (
        f"recipe {args.recipe}: {recipe.description}\n\n# config schema ({recipe.config_class.__name__})\n{schema}"
        f"\n\n# source of {where}\n{_clip(source, MAX_SOURCE_CHARS)}"
    )
    return ToolOutput(text, f"{args.recipe}: {where}, {len(source.splitlines())} lines")


class ScriptArgs(BaseModel):
    model_config = ConfigDict(extra="forbid")

    code: str = Field(min_length=1, description="A complete Python script; its stdout/stderr come back.")
    timeout_s: float = Field(30.0, gt=0, description="Wall-time limit (capped by the run's script limit).")


def _scripts_off(approval: str) -> str | None:
    """Code runs only where the approval policy lets code run unreviewed: under `code` or `always` a person
    approves each trial's code, so the LLM's own scripts (which no one would review) are not offered."""
    gated = {"code", "always"} & set(approval.split(","))
    return f"run_script is off under --approval {approval} (no one reviews its code)" if gated else None


def _run_script(env: ToolEnv, args: ScriptArgs) -> ToolOutput:
    if env.scripts_off:
        raise ToolFailure(env.scripts_off)
    if env.scripts is None:
        raise ToolFailure("run_script is not available here (no sandbox): reason from the other tools")
    if env.budget is not None and (reason := env.budget.exhausted()):
        raise ToolFailure(f"no compute left for scripts: {reason}")
    env.scripts_run += 1
    script_id = f"{env.trial_id}-script{env.scripts_run}"
    timeout = min(args.timeout_s, env.script_timeout_s)
    started = time.monotonic()
    result, folder = env.scripts(script_id, args.code, timeout_s=timeout, memory_mb=env.script_memory_mb)
    seconds = time.monotonic() - started
    if env.budget is not None:
        env.budget.record_compute(seconds)
    try:
        log = untrusted.tail_text(folder, "log.txt", max_bytes=4 * MAX_RESULT_CHARS)
    except OSError:
        log = ""
    status = "exit 0" if result.ok else result.reason()
    text = f"{status} after {seconds:.1f}s (limit {timeout:g}s, network none)\n--- output ---\n{_clip(log)}"
    return ToolOutput(text, f"{script_id}: {status}, {seconds:.1f}s")


TOOLS: Registry[Tool] = Registry("tool", "rlloop.llm_tools")
for _tool in (
    Tool(
        "data_rows",
        "Read rows of the workspace's train or valid split (JSON objects with id, prompt, answer).",
        DataRowsArgs,
        _data_rows,
    ),
    Tool(
        "split_stats",
        "Sizes of the train/valid splits and prompt/answer length statistics.",
        SplitStatsArgs,
        _split_stats,
    ),
    Tool(
        "validation_results",
        "A finished trial's score on the valid split, its wrong answers and failure clusters.",
        ValidationArgs,
        _validation_results,
    ),
    Tool(
        "trial_log",
        "The tail of a trial's training log, its metrics and its outcome.",
        TrialLogArgs,
        _trial_log,
    ),
    Tool(
        "recipe_source",
        "A trainer recipe's config schema and source code, to see what its hyperparameters do.",
        RecipeArgs,
        _recipe_source,
        max_chars=MAX_SOURCE_CHARS + 6000,
    ),
    Tool(
        "run_script",
        "Run a short Python script in the run's sandbox (no network; cwd /workspace, read-only; DATA_PATH and "
        "MODEL_PATH set; write only under OUTPUT_DIR or /tmp) to check an idea cheaply; its seconds count "
        "against the compute budget.",
        ScriptArgs,
        _run_script,
    ),
):
    TOOLS.register(_tool.name, _tool)


def tool_specs(names: Iterable[str] | None = None) -> list[dict[str, Any]]:
    """The OpenAI `tools` list for the named tools (all registered ones by default)."""
    return [TOOLS.get(name).spec() for name in (names if names is not None else TOOLS.names())]


def call_tool(env: ToolEnv, call_id: str, name: str, arguments: str) -> ToolCallRecord:
    """Run one tool call; every failure (unknown tool, bad JSON, bad arguments, the tool's own error) is a result."""
    started = time.monotonic()
    parsed: dict[str, Any] | str = arguments
    try:
        if name not in TOOLS:
            raise ToolFailure(f"unknown tool {name!r}; the tools are: {', '.join(TOOLS.names())}")
        tool = TOOLS.get(name)
        try:
            data = json.loads(arguments or "{}")
        except json.JSONDecodeError as exc:
            raise ToolFailure(f"arguments are not valid JSON ({exc.msg} at column {exc.colno})") from None
        if not isinstance(data, dict):
            raise ToolFailure("arguments must be a JSON object")
        parsed = data
        try:
            args = tool.params.model_validate(data)
        except ValidationError as exc:
            problems = "; ".join(
                f"{'.'.join(map(str, e['loc'])) or 'arguments'}: {e['msg']}" for e in exc.errors()
            )
            raise ToolFailure(f"invalid arguments for {name}: {problems}") from None
        output = tool.run(env, args)
        ok, text, summary = True, _clip(output.text, tool.max_chars), output.summary
    except ToolFailure as exc:
        ok, text, summary = False, f"error: {exc}", f"error: {_one_line(str(exc))}"
    except Exception as exc:  # a broken tool must not take the proposal down with it
        ok, text = False, f"error: {name} failed: {type(exc).__name__}: {exc}"
        summary = _one_line(text)
    return ToolCallRecord(
        call_id=call_id,
        name=name,
        arguments=parsed,
        ok=ok,
        summary=env.redact(summary),
        seconds=round(time.monotonic() - started, 3),
        result=env.redact(text),
    )
