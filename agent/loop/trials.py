"""Turn a proposal into a sandboxed training command and its outcome into a TrialRecord.

A trial's world ends at its own folder (sandbox.view): it reads the run's workspace, its start checkpoint, the base
model and the host's record of it (config.json, train.py), all read-only, at fixed paths, and writes only
`trials/<id>/output`. The host writes the record before the trial starts, into folders it made (`host_dir`), and
reads back only what `sandbox.untrusted` lets it: never through a link the trial made, never a FIFO, never more than
a cap. A checkpoint is sealed by its digest when the trial ends, and checked against it before it is used again.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import site
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.core import Proposal, TrialRecord
from agent.loop.limits import TrialLimits
from agent.proposers import closed_field_problems, proposal_problems
from agent.run import RunPaths
from sandbox import untrusted
from sandbox.base import Mount, Sandbox, SandboxRequest, SandboxResult, maps_paths
from sandbox.namespaces import hand_to_sandbox_user
from sandbox.view import TrialView
from tasks.atomic import atomic_write_json, atomic_write_text
from trainers.model_fit import ModelFit

TRAIN_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DISABLE_MLFLOW_INTEGRATION": "TRUE",
    "WANDB_DISABLED": "true",
}


METRICS_CAP = 1024 * 1024  # a trial's metrics.json: what the host reads of it at most
MAX_RESERVED_SHARE = 0.3  # of a time-boxed trial's max_seconds, kept back for its validation at most


class TrialSetupError(ValueError):
    """The proposal cannot be turned into a runnable trial (unknown recipe, bad hyperparameter, missing parent)."""


class ProposalRefusedError(TrialSetupError):
    """The proposal sets a field the loop owns or names a file the trial cannot see (agent.proposers.proposal_paths)."""


class WarmStartError(TrialSetupError):
    """A warm sandbox cannot take this trial (its start checkpoint cannot be linked in): start a fresh one."""


class CheckpointChangedError(TrialSetupError):
    """A finished trial's checkpoint no longer matches the digest sealed when it ended (or the grader recorded)."""


def check_proposal(proposal: Proposal, *, seen: TrialView) -> None:
    """Refuse a proposal whose hyperparameters set loop-owned fields or name files the trial cannot see.

    Runs on the final proposal (after any human edit) before anything of the trial is written; a recipe's config
    class finds path fields by type, a train_py's free-form config.json by name. `seen`: the trial's folders as it
    sees them (paths are judged there, lexically: nothing on the host is looked up or followed).
    """
    config_class = None
    if not proposal.train_py:
        from trainers.registry import get_recipe

        # an unknown recipe is recipe_config's to report; field names still catch path fields here
        with contextlib.suppress(KeyError):
            config_class = get_recipe(proposal.recipe).config_class
    problems = proposal_problems(proposal.hyperparameters, config_class=config_class, view=seen)
    if problems:
        raise ProposalRefusedError("refused: " + "; ".join(problems))


def with_model_defaults(proposal: Proposal, fit: ModelFit) -> Proposal:
    """The proposal with the base model's defaults (`trainers.model_fit`) in every field it leaves unset, and why in
    its config's notes (`extra.model_fit`): the trial runs what its record says, and a proposer reading it (a debug
    trial halving the batch) starts from what ran. A model built here, or code of its own: unchanged."""
    if proposal.train_py or not fit.pretrained:
        return proposal
    try:
        defaults = fit.defaults(proposal.recipe)
    except KeyError:  # an unknown recipe: recipe_config says so
        return proposal
    missing = {k: v for k, v in defaults.items() if k not in proposal.hyperparameters}
    if not missing:
        return proposal
    notes = proposal.hyperparameters.get("extra")
    notes = {**(notes if isinstance(notes, dict) else {}), "model_fit": f"{', '.join(missing)}: {fit.reason}"}
    return proposal.model_copy(
        update={"hyperparameters": {**proposal.hyperparameters, **missing, "extra": notes}}
    )


def python_for(sandbox: Sandbox) -> str:
    """The interpreter a trial runs with, as its backend declares it (`python`: ours for local processes, the
    image's for containers); "python" on the trial's PATH for a backend that declares none."""
    return sandbox.python or "python"


def start_checkpoint(
    proposal: Proposal, paths: RunPaths, base_model: Path, trials: list[TrialRecord]
) -> Path:
    """The host folder the trial starts from: the base model, or its parent's sealed checkpoint, checked against
    the digest taken when the parent ended (a checkpoint that changed since is refused)."""
    if proposal.init_from in (None, "", "base"):
        return base_model
    parent = next((t for t in trials if t.trial_id == proposal.init_from), None)
    if parent is None or parent.checkpoint is None:
        raise TrialSetupError(f"init_from={proposal.init_from!r} names no finished trial with a checkpoint")
    verify_checkpoint(parent, paths)
    return paths.checkpoint(parent.checkpoint)


def verify_checkpoint(record: TrialRecord, paths: RunPaths) -> None:
    """Raise CheckpointChangedError unless the trial's checkpoint still has the digest sealed when it ended."""
    assert record.checkpoint is not None
    expected = record.checkpoint_sha256
    try:
        now = untrusted.tree_digest(paths.run_dir, record.checkpoint)
    except (OSError, untrusted.UntrustedPathError) as exc:
        raise CheckpointChangedError(
            f"the checkpoint of {record.trial_id} cannot be read safely: {exc}"
        ) from None
    if expected is not None and now != expected:
        raise CheckpointChangedError(
            f"the checkpoint of {record.trial_id} changed since it was trained (sha256 {now[:12]}, sealed "
            f"{expected[:12]}); it is not used"
        )


def recipe_config(
    proposal: Proposal,
    *,
    seen: TrialView,
    benchmark: str,
    prompting: dict[str, Any] | None = None,
    reserved_seconds: float = 0.0,
) -> dict[str, Any]:
    """The recipe's config as the trainer will read it (paths as the trial sees them), validated against the
    recipe's pydantic class. `reserved_seconds`: what a time-boxed trial keeps of its max_seconds for the host's
    validation of its checkpoint (the trial's wall seconds count both)."""
    from trainers.registry import get_recipe

    try:
        recipe = get_recipe(proposal.recipe)
    except KeyError as exc:
        raise TrialSetupError(
            str(exc.args[0]) if exc.args else f"unknown recipe {proposal.recipe!r}"
        ) from None
    closed = closed_field_problems(proposal.hyperparameters)
    if closed:
        raise ProposalRefusedError("refused: " + "; ".join(closed))
    config: dict[str, Any] = {
        **proposal.hyperparameters,
        "model_path": str(seen.model),
        "train_file": str(seen.workspace / "data" / "train.jsonl"),
        "output_dir": str(seen.output),
        "benchmark": benchmark,
        **(prompting or {}),  # the run's prompt format: trials train on the prompts the grader scores
    }
    seconds = proposal.hyperparameters.get("max_seconds")
    if isinstance(seconds, int | float) and reserved_seconds > 0:
        # never so much that the trial cannot train: a short trial after a slow validation overruns its budget a
        # little (its wall seconds count all of it) rather than failing
        config["reserved_seconds"] = round(min(reserved_seconds, MAX_RESERVED_SHARE * float(seconds)), 2)
    try:
        validated = recipe.config_class.model_validate(config)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise TrialSetupError(f"invalid hyperparameters for {proposal.recipe}: {problems}") from None
    return dict(json.loads(validated.model_dump_json()))


@dataclass(frozen=True)
class PreparedTrial:
    """A trial ready to run: its command, and its folders on the host and as it sees them."""

    command: list[str]
    host: TrialView
    seen: TrialView


def trial_folders(paths: RunPaths, trial_id: str, base_model: Path, model: Path) -> TrialView:
    """The host folders of one trial (`model`: the checkpoint it starts from)."""
    return TrialView(
        workspace=paths.workspace,
        model=model,
        base=base_model,
        trial=paths.trial_dir(trial_id),
        output=paths.trial_output(trial_id),
    )


def fresh_output(paths: RunPaths, trial_id: str) -> Path:
    """Make the host's record folder of a trial (refusing a link on the way) and an empty output folder in it,
    handed to the sandbox user: a trial re-run after a crash never starts from a half-written checkpoint."""
    folder = untrusted.host_dir(paths.trial_dir(trial_id), anchor=paths.run_dir)
    output = paths.trial_output(trial_id)
    shutil.rmtree(output, ignore_errors=True)  # fd-based: never follows a link the trial left inside
    output.mkdir(mode=0o755)
    hand_to_sandbox_user(output)
    return folder


def prepare_trial(
    proposal: Proposal,
    *,
    trial_id: str,
    paths: RunPaths,
    base_model: Path,
    trials: list[TrialRecord],
    benchmark: str,
    python: str,
    maps: bool,
    prompting: dict[str, Any] | None = None,
    reserved_seconds: float = 0.0,
    warm_start: Path | None = None,
) -> PreparedTrial:
    """Write the host's record of the trial (proposal.json, config.json, train.py) and return its command.

    `maps`: whether the sandbox shows the trial its folders at fixed paths (`sandbox.base.maps_paths`).
    `warm_start`: the empty host folder a warm sandbox (agent.loop.prewarm) already shows the trial as its start
    checkpoint: the start checkpoint's files are linked into it, and the trial's folders, made when that sandbox
    started, are kept."""
    model_path = start_checkpoint(proposal, paths, base_model, trials)
    if warm_start is not None:
        try:
            untrusted.link_tree(model_path.parent, model_path.name, warm_start)
        except (OSError, untrusted.UntrustedPathError) as exc:
            raise WarmStartError(
                f"the start checkpoint cannot be handed to the warm sandbox: {exc}"
            ) from None
        model_path = warm_start
    host = trial_folders(paths, trial_id, base_model, model_path)
    seen = host.seen(maps)
    check_proposal(proposal, seen=seen)
    config = (
        None
        if proposal.train_py
        else recipe_config(
            proposal, seen=seen, benchmark=benchmark, prompting=prompting, reserved_seconds=reserved_seconds
        )
    )
    trial_dir = (
        fresh_output(paths, trial_id)
        if warm_start is None
        else untrusted.host_dir(paths.trial_dir(trial_id), anchor=paths.run_dir)
    )
    atomic_write_json(trial_dir / "proposal.json", proposal.model_dump())
    if proposal.train_py:
        atomic_write_text(trial_dir / "train.py", proposal.train_py)
        own = {
            **proposal.hyperparameters,
            "model_path": str(seen.model),
            "output_dir": str(seen.output),
            **(prompting or {}),
        }
        atomic_write_json(trial_dir / "config.json", own)
        return PreparedTrial([python, str(seen.trial / "train.py")], host, seen)
    atomic_write_json(trial_dir / "config.json", config)
    command = [python, "-m", "trainers", proposal.recipe, "--config", str(seen.trial / "config.json")]
    return PreparedTrial(command, host, seen)


def plugin_mounts(command: list[str]) -> tuple[list[Mount], list[str]]:
    """A recipe plugin outside this interpreter's environment (on PYTHONPATH, say) is invisible to a trial, whose
    environment is scrubbed and whose view holds only the Python roots: mount its package and metadata read-only
    and return the folders to put on the trial's PYTHONPATH. Nothing for built-ins or plugins installed here."""
    if command[1:3] != ["-m", "trainers"] or len(command) < 4:
        return [], []
    from trainers.registry import plugin_files

    try:
        files = plugin_files(command[3])
    except KeyError:
        return [], []
    roots = [Path(p).resolve() for p in (sys.prefix, sys.base_prefix, site.getusersitepackages())]
    outside = [f for f in files if not any(f.is_relative_to(root) for root in roots)]
    return [Mount(source=f) for f in outside], list(dict.fromkeys(str(f.parent) for f in outside))


def sandbox_request(
    prepared: PreparedTrial, *, trial_id: str, paths: RunPaths, limits: TrialLimits
) -> SandboxRequest:
    """The trial's sandbox request, within `limits`. Its one writable folder is its output; the log is the host's,
    beside it."""
    host, seen = prepared.host, prepared.seen
    plugins, pythonpath = plugin_mounts(prepared.command)
    return SandboxRequest(
        command=prepared.command,
        workspace=host.output,
        workspace_target=seen.output,
        workdir=seen.workspace,
        log_path=host.trial / "log.txt",
        timeout_s=limits.timeout_s,
        memory_mb=limits.memory_mb,
        cpus=limits.cpus,
        gpus=list(limits.gpus),
        env={
            **TRAIN_ENV,
            "MODEL_PATH": str(seen.model),
            "BASE_MODEL_PATH": str(seen.base),
            "DATA_PATH": str(seen.workspace / "data"),
            "OUTPUT_DIR": str(seen.output),
            "TRIAL_DIR": str(seen.trial),
            **({"PYTHONPATH": os.pathsep.join(pythonpath)} if pythonpath else {}),
        },
        mounts=[*host.mounts(seen), *plugins],
        labels={**paths.labels, "rlloop.trial": trial_id},
    )


def checkpoint_problem(paths: RunPaths, relative: str) -> str | None:
    """Why the folder run_dir/relative is not a checkpoint the host will read (links, special files, no config or
    weights), or None. Nothing in it is followed or opened."""
    try:
        files = untrusted.walk(paths.run_dir, relative)
    except FileNotFoundError:
        return "finished without writing a checkpoint (config.json + weights)"
    except (OSError, untrusted.UntrustedPathError) as exc:
        return f"checkpoint refused: {exc}"
    top = {f.rel for f in files if "/" not in f.rel}
    if "config.json" not in top or not any(name.endswith(".safetensors") for name in top):
        return "finished without writing a checkpoint (config.json + weights)"
    return None


def checkpoint_ready(paths: RunPaths, relative: str) -> bool:
    return checkpoint_problem(paths, relative) is None


def read_train_metrics(output_dir: Path) -> dict[str, float]:
    """The numbers of a trial's metrics.json (read without following links, at most METRICS_CAP bytes)."""
    try:
        data = untrusted.read_json(output_dir, "metrics.json", max_bytes=METRICS_CAP)
    except (OSError, ValueError):
        return {}
    if not isinstance(data, dict):
        return {}
    return {
        str(k)[:200]: float(v)
        for k, v in data.items()
        if isinstance(v, int | float) and not isinstance(v, bool)
    }


def outcome(record: TrialRecord, result: SandboxResult, paths: RunPaths, started: float) -> TrialRecord:
    """Fold the sandbox's result into the trial record: succeeded only with a complete checkpoint of regular
    files, sealed by its digest. The metrics the host keeps are its own copy, beside the trial's folder."""
    output_dir = paths.trial_output(record.trial_id)
    relative = str(output_dir.relative_to(paths.run_dir))
    record.duration_s = round(time.time() - started, 2)
    record.log_tail = result.log_tail[-4000:]
    record.train_metrics = read_train_metrics(output_dir)
    atomic_write_json(paths.trial_dir(record.trial_id) / "metrics.json", record.train_metrics)
    problem = checkpoint_problem(paths, relative) if result.ok else None
    if result.ok and problem is None:
        try:
            record.checkpoint_sha256 = untrusted.tree_digest(paths.run_dir, relative)
        except (OSError, untrusted.UntrustedPathError) as exc:
            problem = f"checkpoint refused: {exc}"
    if result.ok and problem is None:
        record.status = "succeeded"
        record.checkpoint = relative
    else:
        record.status = "failed"
        last_line = next((ln for ln in reversed(result.log_tail.splitlines()) if ln.strip()), "")
        reason = result.reason() if not result.ok else str(problem)
        record.error = f"{reason}: {last_line[:300]}" if last_line else reason
    return record


# first when a run names no recipes: what `--proposer fixed` runs, needing nothing else
DEFAULT_RECIPE = "sft"


def allowed_recipes(allowed: str | None) -> list[str]:
    """Registered recipes, limited to the run's `--recipes` list when it gives one (in that order). Without one,
    `DEFAULT_RECIPE` comes first: "the first allowed recipe" is then one that trains anywhere, not the alphabet's
    first (`coach`, which needs an LLM endpoint)."""
    from trainers.registry import list_recipes

    known = [r.name for r in list_recipes()]
    if not allowed:
        return sorted(known, key=lambda name: name != DEFAULT_RECIPE)
    wanted = [r.strip() for r in allowed.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in known]
    if unknown:
        raise ValueError(f"unknown recipe(s) {', '.join(unknown)} in --recipes; known: {', '.join(known)}")
    return wanted


@dataclass(frozen=True)
class SandboxScripts:
    """Runs the LLM proposer's scripts (its `run_script` tool) in the run's sandbox, each like a trial: a folder of
    its own under trials/ (its one writable output), the workspace and the base model read-only, no network. The
    loop hands this to the proposer's tools (`agent.proposers.base.RunView.scripts`); they never import the loop."""

    paths: RunPaths
    sandbox: Sandbox
    base_model: Path  # what a script sees as the model (the run's base model)

    def __call__(
        self, script_id: str, code: str, *, timeout_s: float, memory_mb: int
    ) -> tuple[SandboxResult, Path]:
        folder = fresh_output(
            self.paths, script_id
        )  # the host's folder, and the script's one writable output
        atomic_write_text(folder / "script.py", code)
        host = trial_folders(self.paths, script_id, self.base_model, self.base_model)
        seen = host.seen(maps_paths(self.sandbox))
        request = sandbox_request(
            PreparedTrial([python_for(self.sandbox), str(seen.trial / "script.py")], host, seen),
            trial_id=script_id,
            paths=self.paths,
            limits=TrialLimits(timeout_s=timeout_s, memory_mb=memory_mb),
        )
        request.labels["rlloop.tool"] = "run_script"
        return self.sandbox.run(request), folder
