"""Turn a proposal into a sandboxed training command and its outcome into a TrialRecord."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import site
import sys
import time
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from agent.proposal_paths import closed_field_problems, proposal_problems
from agent.proposers.base import Proposal, TrialRecord
from agent.workspace import RunPaths, atomic_write_json, atomic_write_text
from sandbox.base import Mount, Sandbox, SandboxRequest, SandboxResult

TRAIN_ENV = {
    "HF_HUB_OFFLINE": "1",
    "TRANSFORMERS_OFFLINE": "1",
    "HF_DATASETS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false",
    "TRANSFORMERS_NO_ADVISORY_WARNINGS": "1",
    "DISABLE_MLFLOW_INTEGRATION": "TRUE",
    "WANDB_DISABLED": "true",
}


class TrialSetupError(ValueError):
    """The proposal cannot be turned into a runnable trial (unknown recipe, bad hyperparameter, missing parent)."""


class ProposalRefusedError(TrialSetupError):
    """The proposal sets a field the loop owns or names a file outside the run's workspace (agent.proposal_paths)."""


def check_proposal(proposal: Proposal, *, paths: RunPaths, base_model: Path) -> None:
    """Refuse a proposal whose hyperparameters set loop-owned fields or name files outside the workspace.

    Runs on the final proposal (after any human edit) before anything of the trial is written; a recipe's config
    class finds path fields by type, a train_py's free-form config.json by name.
    """
    config_class = None
    if not proposal.train_py:
        from trainers.registry import get_recipe

        # an unknown recipe is recipe_config's to report; field names still catch path fields here
        with contextlib.suppress(KeyError):
            config_class = get_recipe(proposal.recipe).config_class
    problems = proposal_problems(
        proposal.hyperparameters, config_class=config_class, workspace=paths.workspace, base_model=base_model
    )
    if problems:
        raise ProposalRefusedError("refused: " + "; ".join(problems))


def python_for(sandbox: Sandbox) -> str:
    """The interpreter a trial runs with, as its backend declares it (`python`: ours for local processes, the
    image's for containers); "python" on the trial's PATH for a backend that declares none."""
    declared = getattr(sandbox, "python", None)
    return declared if isinstance(declared, str) and declared else "python"


def start_checkpoint(
    proposal: Proposal, paths: RunPaths, base_model: Path, trials: list[TrialRecord]
) -> Path:
    if proposal.init_from in (None, "", "base"):
        return base_model
    parent = next((t for t in trials if t.trial_id == proposal.init_from), None)
    if parent is None or parent.checkpoint is None:
        raise TrialSetupError(f"init_from={proposal.init_from!r} names no finished trial with a checkpoint")
    return paths.workspace / parent.checkpoint


def recipe_config(
    proposal: Proposal,
    *,
    model_path: Path,
    trial_dir: Path,
    paths: RunPaths,
    benchmark: str,
    prompting: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """The recipe's config as the trainer will read it, validated against the recipe's pydantic class."""
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
        "model_path": str(model_path),
        "train_file": str(paths.data_dir / "train.jsonl"),
        "output_dir": str(trial_dir / "output"),
        "benchmark": benchmark,
        **(prompting or {}),  # the run's prompt format: trials train on the prompts the grader scores
    }
    try:
        validated = recipe.config_class.model_validate(config)
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise TrialSetupError(f"invalid hyperparameters for {proposal.recipe}: {problems}") from None
    return dict(json.loads(validated.model_dump_json()))


def prepare_trial(
    proposal: Proposal,
    *,
    trial_id: str,
    paths: RunPaths,
    base_model: Path,
    trials: list[TrialRecord],
    benchmark: str,
    python: str,
    prompting: dict[str, Any] | None = None,
) -> list[str]:
    """Write the trial's folder (config.json or train.py) and return the command that trains it.

    A trial that is re-run after a crash starts from a clean output folder, so a half-written checkpoint from the
    interrupted attempt can never be submitted.
    """
    check_proposal(proposal, paths=paths, base_model=base_model)
    trial_dir = paths.trial_dir(trial_id)
    shutil.rmtree(trial_dir / "output", ignore_errors=True)
    trial_dir.mkdir(parents=True, exist_ok=True)
    model_path = start_checkpoint(proposal, paths, base_model, trials)
    atomic_write_json(trial_dir / "proposal.json", proposal.model_dump())
    if proposal.train_py:
        atomic_write_text(trial_dir / "train.py", proposal.train_py)
        atomic_write_json(
            trial_dir / "config.json",
            {
                **proposal.hyperparameters,
                "model_path": str(model_path),
                "output_dir": str(trial_dir / "output"),
                **(prompting or {}),
            },
        )
        return [python, str(trial_dir / "train.py")]
    config = recipe_config(
        proposal,
        model_path=model_path,
        trial_dir=trial_dir,
        paths=paths,
        benchmark=benchmark,
        prompting=prompting,
    )
    atomic_write_json(trial_dir / "config.json", config)
    return [python, "-m", "trainers", proposal.recipe, "--config", str(trial_dir / "config.json")]


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
    command: list[str],
    *,
    trial_id: str,
    paths: RunPaths,
    base_model: Path,
    timeout_s: float,
    memory_mb: int,
    cpus: float | None,
    model_path: Path,
    gpus: list[int] | None = None,
) -> SandboxRequest:
    """The trial's sandbox request; `gpus` are the machine-wide ids it is leased (`sandbox.devices.DevicePlan`)."""
    trial_dir = paths.trial_dir(trial_id)
    plugins, pythonpath = plugin_mounts(command)
    return SandboxRequest(
        command=command,
        workspace=paths.workspace,
        log_path=trial_dir / "log.txt",
        timeout_s=timeout_s,
        memory_mb=memory_mb,
        cpus=cpus,
        gpus=list(gpus or []),
        env={
            **TRAIN_ENV,
            "MODEL_PATH": str(model_path),
            "DATA_PATH": str(paths.data_dir),
            "OUTPUT_DIR": str(trial_dir / "output"),
            "TRIAL_DIR": str(trial_dir),
            **({"PYTHONPATH": os.pathsep.join(pythonpath)} if pythonpath else {}),
        },
        mounts=[Mount(source=base_model, read_only=True), *plugins],
        labels={"rlloop.run": paths.run_id, "rlloop.trial": trial_id},
    )


def checkpoint_ready(output_dir: Path) -> bool:
    return (output_dir / "config.json").is_file() and any(output_dir.glob("*.safetensors"))


def read_train_metrics(output_dir: Path) -> dict[str, float]:
    path = output_dir / "metrics.json"
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text())
    except (OSError, ValueError):
        return {}
    return {k: float(v) for k, v in data.items() if isinstance(v, int | float) and not isinstance(v, bool)}


def outcome(record: TrialRecord, result: SandboxResult, paths: RunPaths, started: float) -> TrialRecord:
    """Fold the sandbox's result into the trial record: succeeded only with a complete checkpoint."""
    output_dir = paths.trial_dir(record.trial_id) / "output"
    record.duration_s = round(time.time() - started, 2)
    record.log_tail = result.log_tail[-4000:]
    record.train_metrics = read_train_metrics(output_dir)
    if result.ok and checkpoint_ready(output_dir):
        record.status = "succeeded"
        record.checkpoint = str(output_dir.relative_to(paths.workspace))
    else:
        record.status = "failed"
        last_line = next((ln for ln in reversed(result.log_tail.splitlines()) if ln.strip()), "")
        reason = (
            result.reason()
            if not result.ok
            else "finished without writing a checkpoint (config.json + weights)"
        )
        record.error = f"{reason}: {last_line[:300]}" if last_line else reason
    return record
