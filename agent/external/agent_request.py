"""What the sandbox runs for an external agent: the agent whole, by its start script under a launcher, with
AutoRL-Bench's (or PostTrainBench's) variables; its own folder, made by the host, the one writable place (at
/workspace); the data, instructions, base model, run_meta.json and the agent's own folder mounted read-only at fixed
paths; with a model gateway, the variables that reach it with the placeholder key."""

from __future__ import annotations

import contextlib
import os
import time
from pathlib import Path

from agent.external import posttrainbench
from agent.external.agent_folder import ExternalAgentSpec
from agent.external.gateway import ModelGateway
from agent.external.gateway_setup import agent_env as llm_env
from agent.loop import TRAIN_ENV
from agent.run import RunConfig, RunPaths
from sandbox import untrusted
from sandbox.base import Mount, SandboxRequest
from sandbox.namespaces import hand_to_sandbox_user

AGENT_TRIAL = "agent"  # trials/<id>: the host's record of the agent (its log)
INSIDE = Path("/workspace")  # the agent's folder, as it sees it (its working directory)
META_INSIDE = Path("/run/rlloop-meta")  # the host's run_meta.json folder, read-only
# Re-export RLLOOP_GRADER_URL (what every sandbox backend sets to the address the command can reach) under the
# AutoRL-Bench name, then hand over to the agent's start script exactly as run_agent.py does: `bash <start>`.
LAUNCHER = 'export GRADING_SERVER_URL="${RLLOOP_GRADER_URL:-$GRADING_SERVER_URL}"; exec bash "$0"'
INSIDE_URL = "$GRADING_SERVER_URL"  # how the launcher names the relay's address as the agent sees it


def launcher(llm_urls: dict[str, str] | None = None) -> str:
    """LAUNCHER, and with a model gateway its URL variables re-exported from the address the sandbox set."""
    if not llm_urls:
        return LAUNCHER
    first, _, rest = LAUNCHER.partition("; ")
    exports = " ".join(f'{name}="{value}"' for name, value in llm_urls.items())
    return f"{first}; export {exports}; {rest}"


def agent_request(
    spec: ExternalAgentSpec,
    *,
    paths: RunPaths,
    config: RunConfig,
    base_model: Path,
    grader_url: str,
    timeout_s: float,
    gateway: ModelGateway | None = None,
) -> SandboxRequest:
    """The sandbox request that runs the whole agent: AutoRL-Bench's variables, its own folder the one writable
    place (at /workspace), everything else it reads mounted read-only at fixed paths; with a `gateway`, the model
    variables (the placeholder key; the URLs as the launcher re-exports them from the address the sandbox set)."""
    models = INSIDE / "models" / model_name(config.base_model)
    prepare_agent_dir(paths, str(models.relative_to(INSIDE)))
    env = {
        **TRAIN_ENV,
        **spec.env_vars,
        "TASK": config.benchmark,
        "BASE_MODEL": config.base_model,
        "WORKSPACE": str(INSIDE),
        "MODEL_PATH": str(models),
        "DATA_PATH": str(INSIDE / "data"),
        "OUTPUT_DIR": str(INSIDE / "output"),
        "GRADING_SERVER_URL": grader_url,
    }
    if spec.contract == posttrainbench.CONTRACT:  # PostTrainBench's variables and timer.sh, beside the above
        env["PROMPT"] = posttrainbench.prompt(
            config.base_model, config.benchmark, str(models.relative_to(INSIDE)), timeout_s
        )
        env["AGENT_CONFIG"] = (
            gateway.config.models[0] if gateway is not None and gateway.config.models else ""
        )
        env["NUM_GPUS"] = str(config.trial_gpus)
        posttrainbench.write_timer(paths.agent_meta_dir, time.time() + timeout_s)
        posttrainbench.link_timer(paths.agent_dir, META_INSIDE)
    llm_urls: dict[str, str] = {}
    if gateway is not None:
        inside = llm_env(gateway.placeholder, INSIDE_URL, gateway.config.models)
        llm_urls = {k: v for k, v in inside.items() if INSIDE_URL in v}
        env.update(llm_env(gateway.placeholder, grader_url, gateway.config.models))  # the host-side address
    readonly = [
        Mount(source=paths.data_dir, target=INSIDE / "data"),
        *(
            Mount(source=paths.workspace / name, target=INSIDE / name)
            for name in ("description.md", "instructions.md")
            if (paths.workspace / name).is_file()
        ),
        Mount(source=base_model, target=models),
        Mount(source=paths.agent_meta_dir, target=META_INSIDE),
        Mount(source=spec.folder, target=Path("/agent")),
    ]
    return SandboxRequest(
        command=["bash", "-c", launcher(llm_urls), str(Path("/agent") / spec.start)],
        workspace=paths.agent_dir,
        workspace_target=INSIDE,
        log_path=untrusted.host_dir(paths.trial_dir(AGENT_TRIAL), anchor=paths.run_dir) / "log.txt",
        timeout_s=timeout_s,
        memory_mb=config.trial_memory_mb,
        cpus=config.trial_cpus,
        env=env,
        mounts=readonly,
        network="grader",
        grader_url=grader_url,
        labels={**paths.labels, "rlloop.trial": AGENT_TRIAL},
    )


def model_name(name: str) -> str:
    """`models/<name>` as AutoRL-Bench names it: the hub id, or a local folder's last part."""
    return Path(name).name if Path(name).is_absolute() else name


def prepare_agent_dir(paths: RunPaths, model_rel: str) -> None:
    """The agent's folder (made by the host, handed to the sandbox user) with AutoRL-Bench's `code/` and
    `output/`, and `run_meta.json` as a link to the host's read-only copy. Names the agent already took (a
    resumed run) are left as they are: nothing here follows, overwrites or walks what the agent made."""
    untrusted.host_dir(paths.agent_meta_dir, anchor=paths.run_dir)
    folder = untrusted.host_dir(paths.agent_dir, anchor=paths.run_dir)
    hand_to_sandbox_user(folder)
    # code/ and output/ for the agent; the folders the base model is mounted under (models/, models/<org>/), made
    # here so the agent can traverse them (a mount point's missing parents would be root's, 0700)
    made = ["code", "output", *(str(p) for p in reversed(Path(model_rel).parents) if str(p) != ".")]
    for name in made:
        with contextlib.suppress(FileExistsError):
            (folder / name).mkdir(mode=0o755)
            hand_to_sandbox_user(folder / name)
    with contextlib.suppress(FileExistsError):
        os.symlink(META_INSIDE / "run_meta.json", folder / "run_meta.json")
