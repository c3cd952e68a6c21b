"""A research run's start: its folder and record (`start_run`, before its log exists; a resumed run takes its saved
config back), its budget, and the recipe catalogue its pages read. The driver comes here first, then to
`agent.loop.context.build_context` (everything its nodes work with), and never again."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from agent.llm import Budget, BudgetLimits
from agent.run import Reporter, RunConfig, RunPaths, locate_run, record_run
from sandbox.devices import DevicePlan, plan_devices


@dataclass(frozen=True)
class StartedRun:
    """A research run with its folder and record on disk, before anything slow: what `agent.loop.context.build_context` builds on."""

    config: RunConfig  # a resumed run's own saved config
    paths: RunPaths
    devices: DevicePlan
    came_back: bool  # resumed, or a run id an earlier (dead) process had taken: leftovers to end


def start_run(config: RunConfig, resume_run_id: str | None = None) -> StartedRun:
    """Locate (or create) the run's folder and record what it runs with. Fails fast, before any log exists, on a
    run id that is taken, a resumed run that is not there, or too few GPUs for --trial-gpus."""
    paths = locate_run(config, resume_run_id)
    if resume_run_id:
        config = saved_config(paths, quiet=config.quiet)
    elif paths.run_dir.exists() and paths.checkpoints_db.exists():
        raise FileExistsError(
            f"run {paths.run_id!r} already exists; resume it with `rlloop resume {paths.run_id}`"
        )
    came_back = paths.run_dir.exists()
    devices = plan_devices(config.trial_gpus)
    record_run(config, paths)
    return StartedRun(config=config, paths=paths, devices=devices, came_back=came_back)


def write_recipe_catalog(paths: RunPaths, reporter: Reporter) -> None:
    """The recipes as this run runs them, as data (run_dir/recipes.json: schemas, defaults, source): the service's
    pages read it instead of importing a trainer (`agent.service.recipes`). A resumed run writes it again, as its
    later trials run the code of now."""
    from trainers.catalog import CATALOG_NAME, write_catalog

    try:
        with reporter.watching("describing the recipes for the run page"):
            write_catalog(paths.run_dir / CATALOG_NAME)
    except Exception as exc:  # noqa: BLE001 - the page reads the recipes itself then; the run goes on
        reporter.warn(f"could not describe the recipes into {CATALOG_NAME}: {type(exc).__name__}: {exc}")


def saved_config(paths: RunPaths, *, quiet: bool) -> RunConfig:
    """A resumed run runs with what it started with (run.json), quiet or not as asked now."""
    saved = json.loads(paths.run_json.read_text())
    saved.pop("run_id", None)
    saved.pop("environment", None)  # a record of where it ran, not config
    saved["home"] = str(paths.home)
    return RunConfig.model_validate({**saved, "quiet": quiet, "run_id": paths.run_id})


def make_budget(config: RunConfig, ledger: Path | None = None) -> Budget:
    """The run's LLM and compute allowance; with a ledger, a resumed run goes on from what it spent."""
    return Budget(
        BudgetLimits(
            max_usd=config.llm_max_usd, max_tokens=config.llm_max_tokens, max_compute_s=config.max_compute_s
        ),
        ledger=ledger,
    )
