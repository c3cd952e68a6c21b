"""`rlloop bench` and `rlloop report`. The lead mounts `bench` and `report` on the main app (or `app` as a group)."""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.markdown import Markdown

from agent.run import parse_duration, run_config_fields

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)  # a path or node id in an error is never split


# RunConfig fields `rlloop bench` passes on to every run (`SweepSpec.run_overrides`), with RunConfig's flags and help.
RUN_FIELDS = (
    "eval_limit",
    "sandbox",
    "agent_llm_base_url",
    "agent_llm_key_env",
    "agent_llm_models",
    "agent_llm_max_request_bytes",
    "agent_llm_max_output_tokens",
    "llm_max_tokens",
    "llm_max_usd",
)


def _fail(message: str) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(2)


def _home(home: Path | None) -> Path:
    return home or Path(os.environ.get("RLLOOP_HOME", ".rlloop"))


@app.command("bench")
@run_config_fields(*RUN_FIELDS)
def bench(
    benchmarks: Annotated[str, typer.Option(help="Comma list, e.g. arith,gsm8k.")] = "arith",
    base_models: Annotated[str, typer.Option(help="Comma list of base models.")] = "tiny-arith",
    proposers: Annotated[
        str | None,
        typer.Option(
            help="Comma list of proposers: builtin, llm, or a plugin's name (default builtin; none with --agents)."
        ),
    ] = None,
    agents: Annotated[
        list[str] | None,
        typer.Option(
            help="External agents: claude-code, codex, opencode (the coding agents, in the agent image), or a "
            "folder: AutoRL-Bench's (config.yaml + start script) or PostTrainBench's (solve.sh); a comma list, "
            "repeatable."
        ),
    ] = None,
    seeds: Annotated[int, typer.Option(help="Seeds 0..N-1 per combination.")] = 1,
    timeout: Annotated[str, typer.Option(help="Budget of each run, e.g. 30m.")] = "30m",
    loop_n: Annotated[int | None, typer.Option(help="Trials per run.")] = None,
    concurrency: Annotated[
        int | None, typer.Option(help="Runs at once (default 1 locally, all with --ray).")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(
            "--ray",
            "--ray-address",
            help="Ray cluster address ('auto', 'local', host:port); RAY_ADDRESS too.",
        ),
    ] = None,
    executor: Annotated[
        str, typer.Option(help="Where runs go: auto (ray with --ray, else local), local, ray, or a plugin.")
    ] = "auto",
    sweep_id: Annotated[str | None, typer.Option(help="Name the sweep; the same id continues it.")] = None,
    home: Annotated[Path | None, typer.Option(help="RLLOOP_HOME (default ./.rlloop).")] = None,
    **run_flags: str | None,
) -> None:
    """Run every benchmark x base model x agent x seed combination as a research run; resumable by --sweep-id."""
    sandbox = run_flags.get("sandbox")
    agent_llm_base_url = run_flags.get("agent_llm_base_url")
    agent_llm_key_env = run_flags.get("agent_llm_key_env")
    agent_llm_models = run_flags.get("agent_llm_models")
    from agent.external import ExternalAgentError, is_agent_folder, load_agent, named, named_agent_problem
    from agent.proposers import PROPOSERS
    from agent.run import RunConfig
    from agent.sweeps.driver import run_sweep
    from agent.sweeps.spec import SweepSpec

    if proposers is None:  # `--agents DIR` alone runs the agents, not a built-in loop beside them
        proposers = "" if agents else "builtin"
    names = [p.strip() for p in proposers.split(",") if p.strip()]
    unknown = [p for p in names if p not in PROPOSERS]
    if unknown:
        _fail(
            f"unknown proposer(s) {', '.join(unknown)}: use {', '.join(PROPOSERS.names())}, and --agents DIR for "
            "external agents"
        )
    folders = []
    coding_agents = False
    # a comma list unless the value is itself a folder (a path with a comma in its name)
    given = [p for v in agents or [] for p in ([v] if Path(v).is_dir() else v.split(",")) if p.strip()]
    for folder in given:
        folder = folder.strip()
        if not is_agent_folder(folder):
            _fail(
                f"--agents {folder}: not a coding agent ({', '.join(named.NAMED_AGENTS)}) nor an agent folder "
                "(config.yaml with name and start, or solve.sh)"
            )
        try:
            spec_ = load_agent(folder)
        except ExternalAgentError as exc:
            _fail(str(exc))
            return
        coding_agents = coding_agents or named.is_named_folder(spec_.folder)
        checked = RunConfig.model_construct(  # the flags, or the RLLOOP_* variables each run would read
            agent_llm_base_url=agent_llm_base_url or os.environ.get("RLLOOP_AGENT_LLM_BASE_URL"),
            agent_llm_models=agent_llm_models or os.environ.get("RLLOOP_AGENT_LLM_MODELS"),
        )
        problem = named_agent_problem(spec_, checked)
        if problem is not None:
            _fail(problem)
        folders.append(folder if named.is_named(folder) else str(spec_.folder))
    if folders:
        from agent.external import missing_agent_image

        problem = missing_agent_image(sandbox or "auto", coding_agents=coding_agents)
        if problem is not None:
            _fail(problem)
    address = ray or os.environ.get("RAY_ADDRESS")
    overrides: dict[str, object] = {k: v for k, v in run_flags.items() if v is not None}
    if sandbox == "ray" and address:  # each run's trials go to the same cluster
        overrides["ray_address"] = address
    if agent_llm_key_env and not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", agent_llm_key_env):
        _fail(
            "--agent-llm-key-env takes the name of the variable that holds the key (e.g. OPENAI_API_KEY), not a key"
        )
    if agent_llm_key_env and not os.environ.get(agent_llm_key_env):
        _fail(
            f"--agent-llm-key-env {agent_llm_key_env}: that variable is not set here; export it (the key stays on "
            "this host, the agents get a placeholder)"
        )
    try:
        spec = SweepSpec(
            **({"sweep_id": sweep_id} if sweep_id else {}),
            benchmarks=benchmarks.split(","),
            base_models=base_models.split(","),
            agents=[*names, *folders],
            seeds=seeds,
            timeout=parse_duration(timeout),
            loop_n=loop_n,
            concurrency=concurrency or (256 if address else 1),
            ray_address=address,
            executor=executor,
            run_overrides=overrides,
        )
    except ValidationError as exc:
        _fail(
            "invalid sweep: " + "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        )
        return
    except ValueError as exc:
        _fail(f"invalid sweep: {exc}")
        return
    from tasks.registry import BENCHMARKS

    for name in spec.benchmarks:  # as each run's RunConfig will check it, before any run starts
        try:
            BENCHMARKS.check(name)
        except ValueError as exc:
            _fail(str(exc))
    root = _home(home)
    console.print(
        f"sweep [bold]{spec.sweep_id}[/bold]: {len(spec.combinations())} runs; continue it with --sweep-id {spec.sweep_id}"
    )
    from sandbox.base import SandboxUnavailableError

    try:
        manifest = run_sweep(spec, root, console=console)
    except SandboxUnavailableError as exc:  # a Ray node without the shared RLLOOP_HOME, named
        _fail(str(exc))
        return
    from agent.sweeps.report import write_report

    _, md_path, _ = write_report(root.resolve(), manifest)
    console.print(f"report: {md_path} | `rlloop report --sweep-id {spec.sweep_id}`")
    if manifest.status != "finished":
        raise typer.Exit(130 if manifest.status == "interrupted" else 1)


@app.command("report")
def report(
    sweep_id: Annotated[str | None, typer.Option(help="The sweep (default: the newest).")] = None,
    home: Annotated[Path | None, typer.Option(help="RLLOOP_HOME (default ./.rlloop).")] = None,
) -> None:
    """Compare a sweep's agents (mean ± SE over seeds, noise marked); writes report.md and report.png."""
    from agent.sweeps import manifest as manifests
    from agent.sweeps.report import write_report

    root = _home(home).resolve()
    chosen = sweep_id or manifests.latest_sweep_id(root)
    if chosen is None:
        _fail(f"no sweeps under {root / 'sweeps'}; start one with `rlloop bench`")
        return
    try:
        manifest = manifests.load(root, chosen)
    except ValueError as exc:
        _fail(str(exc))
        return
    if manifest is None:
        _fail(f"no sweep {chosen!r} under {root / 'sweeps'}; `ls {root / 'sweeps'}` lists them")
        return
    markdown, md_path, plot = write_report(root, manifest)
    console.print(Markdown(markdown))
    console.print(f"written: {md_path}" + (f", {plot}" if plot else ""))


if __name__ == "__main__":
    app()
