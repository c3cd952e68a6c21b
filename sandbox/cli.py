"""`rlloop sandbox ...`: build the trainer image, check that Docker is usable, remove leftovers."""

from __future__ import annotations

import typer

app = typer.Typer(
    help="Sandboxes for trials: build the trainer image, check Docker, clean up.", no_args_is_help=True
)


@app.command()
def build(
    gpu: bool = typer.Option(False, "--gpu", help="Build the CUDA image (needs --online and a GPU host)."),
    agent: bool = typer.Option(
        False,
        "--agent",
        help="Also build rlloop/agent:cpu (the CPU image plus AutoRL-Bench's agent packages) for `bench --agents`.",
    ),
    offline: bool | None = typer.Option(
        None,
        "--offline/--online",
        help="Offline builds the base with debootstrap; default: decide by probing.",
    ),
) -> None:
    """Build rlloop/trainer:cpu (or :gpu) from a wheelhouse of this host's package versions; with --agent, then
    rlloop/agent:cpu on top of the CPU image."""
    from sandbox.image_build import build_agent_image, build_image

    if agent and gpu:
        typer.echo("error: --agent builds on the CPU image; build --gpu and --agent separately", err=True)
        raise typer.Exit(2)
    try:
        tags = [build_image(gpu=gpu, offline=offline, say=lambda line: typer.echo(line))]
        if agent:
            tags.append(build_agent_image(say=lambda line: typer.echo(line)))
    except Exception as exc:  # noqa: BLE001 - one clear line instead of a traceback
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(1) from exc
    typer.echo(f"ok: {', '.join(tags)}")


@app.command()
def check() -> None:
    """Say whether the docker backend can run trials here (exit 1 when it cannot)."""
    from sandbox.status import docker_status

    status = docker_status()
    typer.echo(status.summary())
    if status.usable:
        typer.echo(f"image inputs {status.image_inputs}, expected {status.expected_inputs}")
    raise typer.Exit(0 if status.usable else 1)


@app.command()
def clean() -> None:
    """Remove every rlloop container and grader network left behind by dead runs."""
    from sandbox.backends.docker import DockerSandbox

    try:
        sandbox = DockerSandbox()
    except Exception as exc:  # noqa: BLE001
        typer.echo(f"error: docker engine not reachable: {exc}", err=True)
        raise typer.Exit(1) from exc
    removed = sandbox.cleanup()
    typer.echo(f"removed {removed} container(s)")
