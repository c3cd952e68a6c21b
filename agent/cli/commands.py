"""`rlloop`: run, resume and inspect research runs; list benchmarks; approve proposals; open the MLflow UI."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any, Literal

import typer
from pydantic import ValidationError
from rich.console import Console
from rich.table import Table

from agent.run import RunConfig, flag_name, load_config_file, run_config_options
from sandbox.registry import SANDBOXES

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)
console = Console(highlight=False)
err = Console(stderr=True, highlight=False, soft_wrap=True)


def fail(message: str, code: int = 2) -> None:
    err.print(f"[red]error:[/red] {message}")
    raise typer.Exit(code)


def _home(home: Path | None) -> Path:
    return home or Path(os.environ.get("RLLOOP_HOME", ".rlloop"))


def build_config(config_file: Path | None, flags: dict[str, Any]) -> RunConfig:
    """CLI flags beat env vars, which beat the config file, which beats defaults."""
    values: dict[str, Any] = {}
    if config_file is not None:
        file_values = load_config_file(config_file)
        values.update({k: v for k, v in file_values.items() if f"RLLOOP_{k.upper()}" not in os.environ})
    values.update({k: v for k, v in flags.items() if v is not None})
    try:
        return RunConfig(**values)
    except ValidationError as exc:
        problems = "; ".join(f"{flag_name('_'.join(map(str, e['loc'])))}: {e['msg']}" for e in exc.errors())
        fail(f"invalid run configuration: {problems}")
        raise AssertionError from exc


def _execute(config: RunConfig, resume_run_id: str | None = None) -> None:
    from agent.launch import launch_to_exit

    code = launch_to_exit(
        config, error=lambda line: err.print(f"[red]error:[/red] {line}"), resume_run_id=resume_run_id
    )
    if code:
        raise typer.Exit(code)


@app.command()
@run_config_options
def run(config_file: str | None = None, **flags: Any) -> None:
    """Run a research loop: baseline, then propose -> train -> submit until --loop-n trials or --timeout."""
    _execute(build_config(Path(config_file) if config_file else None, flags))


@app.command()
def resume(
    run_id: Annotated[str, typer.Argument(help="The run to continue (`rlloop runs`).")],
    home: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Continue a run from its last checkpoint: finished trials are kept, none is submitted twice."""
    _execute(build_config(None, {"home": home}), resume_run_id=run_id)


@app.command()
def benchmarks() -> None:
    """List the benchmarks rlloop knows, with where each comes from (built in, entry point or a folder)."""
    from grader.benchmarks.registry import describe_benchmarks, registry_problems

    table = Table("benchmark", "source", "description", "location")
    for info in describe_benchmarks():
        table.add_row(info.name, str(info.source), info.description[:90], info.location)
    console.print(table)
    for problem in registry_problems():
        err.print(f"[yellow]warning:[/yellow] {problem}")


@app.command()
def runs(home: Annotated[Path | None, typer.Option()] = None) -> None:
    """Past runs with baseline, best, submissions and status (newest last), and each run's headline in words."""
    from agent.status import checkpoint_text, collect_runs

    rows = collect_runs(_home(home))
    if not rows:
        console.print(f"no runs under {_home(home) / 'runs'} yet; start one with `rlloop run`")
        return
    table = Table("run", "benchmark", "model", "status", "public half", "private half", "subs", "trials")
    table.columns[0].no_wrap = True
    for r in rows:
        h = r.headline
        private = ""
        if h is not None and h.private_baseline is not None:
            best = h.private_best if h.private_best is not None else h.private_baseline
            private = f"{r.fmt(h.private_baseline)} → {r.fmt(best)}"
        public = f"{r.fmt(r.baseline)} → {r.fmt(r.best)}" if r.best is not None else r.fmt(r.baseline)
        table.add_row(
            r.run_id,
            r.benchmark,
            r.base_model,
            r.status,
            public,
            private,
            str(r.submissions),
            str(r.trials),
        )
    console.print(table)
    for r in rows:
        if r.error:
            console.print(f"{r.run_id} failed: {r.error}")
        elif r.headline and r.headline.public_baseline is not None:
            where = checkpoint_text(r.headline)
            console.print(
                f"{r.run_id}: {r.headline.text}" + (f"\n  {where}" if where else ""), soft_wrap=True
            )


@app.command()
def approvals(home: Annotated[Path | None, typer.Option()] = None) -> None:
    """Proposals waiting for a decision, across runs."""
    from agent.loop import list_pending

    pending = list_pending(_home(home) / "runs")
    if not pending:
        console.print("nothing waits for approval")
        return
    table = Table("run", "trial", "recipe", "from", "hyperparameters", "code", "hypothesis")
    for run_id, trial in pending:
        p = trial.proposal
        table.add_row(
            run_id,
            trial.trial_id,
            p.recipe,
            p.init_from or "base",
            str(p.hyperparameters),
            "yes" if p.train_py else "no",
            p.hypothesis[:60],
        )
    console.print(table)


@app.command()
def approve(
    run_id: Annotated[str, typer.Argument()],
    trial: Annotated[str | None, typer.Option(help="Trial id (default: the one waiting).")] = None,
    set_: Annotated[list[str] | None, typer.Option("--set", help="key=value hyperparameter edit.")] = None,
    reject: Annotated[
        str | None, typer.Option(help="Reject with this reason (fed back to the proposer).")
    ] = None,
    terminate: Annotated[bool, typer.Option(help="End the run.")] = False,
    by: Annotated[str | None, typer.Option(help="Who decides (default: your user name).")] = None,
    home: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Approve, edit (--set), reject (--reject REASON) or --terminate a waiting proposal."""
    import json

    from agent.loop import Decision, list_pending, write_decision

    runs_dir = _home(home) / "runs"
    waiting = [t for r, t in list_pending(runs_dir) if r == run_id]
    if trial is None:
        if not waiting:
            fail(f"nothing waits for approval in run {run_id!r}; `rlloop approvals` lists what does")
        trial = waiting[0].trial_id
    edits: dict[str, Any] = {}
    for item in set_ or []:
        if "=" not in item:
            fail(f"--set {item!r}: write key=value, e.g. --set learning_rate=5e-4")
        key, raw = item.split("=", 1)
        try:
            edits[key.strip()] = json.loads(raw)
        except ValueError:
            edits[key.strip()] = raw
    action: Literal["approve", "edit", "reject", "terminate"] = (
        "terminate" if terminate else "reject" if reject else "edit" if edits else "approve"
    )
    decision = Decision(action=action, reason=reject, set=edits, **({"by": by} if by else {}))
    try:
        write_decision(runs_dir / run_id, trial, decision)
    except LookupError as exc:
        fail(str(exc))
    console.print(f"{run_id} {trial}: {action}")


@app.command()
def ui(
    home: Annotated[Path | None, typer.Option()] = None,
    port: Annotated[int, typer.Option()] = 5000,
    host: Annotated[str, typer.Option()] = "127.0.0.1",
    workers: Annotated[
        int, typer.Option(min=1, help="Server worker processes (one is plenty for one reviewer).")
    ] = 1,
) -> None:
    """Open the MLflow UI on the run store: a lean server (one worker, no job runners)."""
    from agent.processes import run_child
    from agent.tracking import review_links, ui_command

    root = _home(home).resolve()
    cmd, env = ui_command(root, host=host, port=port, workers=workers)
    console.print(f"MLflow UI for sqlite:///{root / 'mlflow.db'} on http://{host}:{port}")
    # MLflow's own experiment pages open a fresh browser on the GenAI overview, whatever the experiment's kind tag
    links = review_links(root, f"http://{host}:{port}")
    if links:
        console.print("training runs with a reviewer's columns (their Chart switch draws the score plots):")
    for name, link in links:
        console.print(f"  {name}: {link}", soft_wrap=True)
    raise typer.Exit(run_child(cmd, env=env))  # its server worker stops with us


grade_app = typer.Typer(no_args_is_help=True, help="The grading server on its own, for external agents.")
app.add_typer(grade_app, name="grade")


@grade_app.command("serve")
def grade_serve(
    benchmark: Annotated[str, typer.Option(help="Benchmark name (`rlloop benchmarks`).")] = "arith",
    base_model: Annotated[str, typer.Option(help="Built-in name, local HF folder or hub id.")] = "tiny-arith",
    submissions_root: Annotated[
        Path, typer.Option(help="Submitted checkpoints must lie under this folder (the agent's output dir).")
    ] = Path("outputs"),
    port: Annotated[int, typer.Option(help="0 picks a free port.")] = 0,
    host: Annotated[
        str, typer.Option(help="Bind address; keep loopback unless a sandbox network needs more.")
    ] = ("127.0.0.1"),
    token: Annotated[
        str | None, typer.Option(envvar="RLLOOP_GRADER_TOKEN", help="Bearer token (default: random).")
    ] = None,
    max_submissions: Annotated[int | None, typer.Option()] = None,
    min_interval: Annotated[float, typer.Option(help="Minimum seconds between submissions.")] = 0.0,
    public_fraction: Annotated[
        float, typer.Option(help="Public share of the hidden test set; 0 = off.")
    ] = 0.5,
    eval_limit: Annotated[int | None, typer.Option()] = None,
    run_id: Annotated[str | None, typer.Option(help="Reuse a grader's store (default: a new one).")] = None,
    home: Annotated[Path | None, typer.Option()] = None,
) -> None:
    """Serve one benchmark's hidden test set for an external agent (AutoRL-Bench's API: /submit, /health, /time)."""
    import json
    import secrets

    from agent.processes import free_port
    from agent.run import ModelNotFoundError, ensure_home, new_run_id, resolve_base_model
    from grader.benchmarks import get_benchmark
    from tasks.atomic import atomic_write_json
    from tasks.plugins import UnknownPluginError

    root = ensure_home(_home(home))
    try:
        get_benchmark(benchmark)
        model = resolve_base_model(base_model, root)
    except (UnknownPluginError, ModelNotFoundError) as exc:
        fail(str(exc))
        return
    grader_id = run_id or f"grade-{new_run_id(benchmark)}"
    private = root / "graders" / grader_id
    config_path = private / "config.json"
    if config_path.exists():
        config = json.loads(config_path.read_text())
        config["port"] = port or free_port()
    else:
        submissions_root.mkdir(parents=True, exist_ok=True)
        config = {
            "run_id": grader_id,
            "benchmark": benchmark,
            "base_model": str(model),
            "private_dir": str(private),
            "scores_mirror": str(root / "graders" / f"{grader_id}.scores.json"),
            "token": token or secrets.token_urlsafe(24),
            "host": host,
            "port": port or free_port(),
            "allowed_roots": [str(submissions_root.resolve())],
            "max_submissions": max_submissions,
            "min_interval_s": min_interval,
            "public_fraction": public_fraction or None,
            "eval": {"limit": eval_limit},
        }
    private.mkdir(parents=True, exist_ok=True)
    private.chmod(0o700)
    atomic_write_json(config_path, config, mode=0o600)  # the token: never readable by others
    url = f"http://{config['host']}:{config['port']}"
    console.print(f"grading server for {benchmark} (base model {model})")
    console.print(f"  GRADING_SERVER_URL={url}")
    console.print(f"  GRADER_TOKEN={config['token']}")
    console.print(f"  submissions must lie under {config['allowed_roots'][0]}; store: {private}")
    console.print("  the baseline is scored before /health reports ready; Ctrl-C stops the server")
    from agent.processes import run_child

    raise typer.Exit(run_child([sys.executable, "-m", "grader", "serve", "--config", str(config_path)]))


def sandbox_list() -> None:
    """The sandbox backends `--sandbox` may name (built in or from plugins), and plugins that failed to load."""
    table = Table("sandbox", "from")
    for name in SANDBOXES.choices():
        reserved = name in SANDBOXES.reserved
        table.add_row(name, "picks docker when usable, else local" if reserved else SANDBOXES.origin(name))
    console.print(table)
    for problem in SANDBOXES.problems():
        err.print(f"[yellow]warning:[/yellow] {problem}")


def _mount_subcommands() -> None:
    """Commands whose code lives with the part they drive (sandbox, trainers, service, sweeps)."""
    from agent.service import serve_app
    from agent.sweeps import bench, report
    from sandbox.cli import app as sandbox_app
    from trainers.verl.cli import ListingCommand, check_inputs_command, plan_command

    sandbox_app.command("list")(sandbox_list)
    app.add_typer(sandbox_app, name="sandbox", help="List, build, check and clean the trial sandboxes.")
    app.command(
        "plan",
        cls=ListingCommand,
        help="Plan verl jobs for runs too large for one machine (prints; starts nothing).",
    )(plan_command)
    app.command(
        "check-inputs", cls=ListingCommand, help="Validate what a plan depends on, without loading any model."
    )(check_inputs_command)
    app.add_typer(
        serve_app,
        name="serve",
        help="The run service: start, list, cancel and resume runs; approve on a web page. `serve users` adds users.",
    )
    app.command("bench", help="Run every benchmark x base model x agent x seed combination (resumable).")(
        bench
    )
    app.command("report", help="Compare a sweep's runs: mean and standard error over seeds, noise marked.")(
        report
    )


_mount_subcommands()


def main() -> None:
    import logging

    # `rlloop benchmarks` reports broken definitions itself
    logging.getLogger("tasks.registry").setLevel(logging.ERROR)
    app()


if __name__ == "__main__":
    main()
