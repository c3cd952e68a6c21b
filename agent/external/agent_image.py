"""Where an external agent runs: Docker runs it in the agent image (AutoRL-Bench's packages and the coding agents'
CLIs), never in the lean trainer image, and a missing or stale agent image is an error saying how to build it; other
backends run it as they run trials, isolated or refused."""

from __future__ import annotations

from agent.run import Reporter, RunConfig, open_sandbox
from sandbox.base import Sandbox


class AgentImageMissingError(RuntimeError):
    """Docker is how this run isolates the agent, but the agent image has not been built."""


def agent_sandbox(config: RunConfig, reporter: Reporter, coding_agents: bool = False) -> Sandbox:
    """Docker runs the agent in the agent image (AutoRL-Bench's packages), never in the lean trainer image: with
    `--sandbox docker`, or `auto` where Docker is usable, a missing agent image is an error saying how to build it.
    Other backends run the agent as they run trials."""
    from sandbox.images import AGENT_IMAGE
    from sandbox.registry import get_sandbox, resolve_auto

    if config.sandbox not in ("docker", "auto"):
        return open_sandbox(config, reporter, require_isolation=True)
    problem = missing_agent_image(config.sandbox, coding_agents=coding_agents)
    if problem is not None:
        raise AgentImageMissingError(problem)
    choice = resolve_auto(AGENT_IMAGE)  # docker usable with the agent image: docker, running that image
    if choice.name == "docker":
        return get_sandbox("docker", image=choice.image)
    return open_sandbox(config, reporter, require_isolation=True)


def missing_agent_image(sandbox: str, coding_agents: bool = False) -> str | None:
    """Why external agents cannot run with `sandbox` here (Docker chosen, agent image not built; with
    `coding_agents`, an image built without the pinned CLIs), else None."""
    from sandbox.agent_clis import AGENT_CLIS_LABEL, agent_clis_pins
    from sandbox.images import AGENT_IMAGE
    from sandbox.registry import resolve_auto
    from sandbox.status import docker_status, image_labels

    if sandbox not in ("docker", "auto"):
        return None
    status = docker_status(AGENT_IMAGE)
    if not status.engine_reachable:
        return None
    if sandbox != "docker" and resolve_auto().name != "docker":  # auto would not pick docker
        return None
    if not status.image_present:
        return (
            f"external agents run in the image {AGENT_IMAGE} (the trainer image plus AutoRL-Bench's agent "
            "packages and the coding agents), which is not built: run `rlloop sandbox build --agent`"
        )
    if coding_agents and image_labels(AGENT_IMAGE).get(AGENT_CLIS_LABEL) != agent_clis_pins():
        return (
            f"the image {AGENT_IMAGE} was built without the coding agents at the versions this rlloop runs "
            f"({agent_clis_pins()}): run `rlloop sandbox build --agent` again"
        )
    return None
