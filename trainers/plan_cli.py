"""`plan` and `check-inputs`: scale-out planning and input validation, as a Typer sub-app for `rlloop`.

Neither command runs training or loads a model: `plan` prints the staged verl commands and their checklist,
`check-inputs` reports every problem in experience lists, system prompts and data roots with file and line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from trainers.check_inputs import check_inputs
from trainers.verl_plan import family_names, plan

app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)


@app.command("plan")
def plan_command(
    family: Annotated[str, typer.Option("--family", help=f"One of: {', '.join(family_names())}.")],
    stage: Annotated[str, typer.Option(help="'all' or one stage of the family.")] = "all",
    model: Annotated[
        str, typer.Option(help="Model path (use <MODEL_ROOT>/...) or hub id.")
    ] = "<MODEL_ROOT>/base",
    nodes: Annotated[int, typer.Option(min=1)] = 1,
    gpus_per_node: Annotated[int, typer.Option(min=1)] = 8,
    gpu_type: Annotated[str, typer.Option()] = "NVIDIA H100 80GB",
    rollout_n: Annotated[int, typer.Option(min=1, help="Samples per prompt.")] = 8,
    train_batch_size: Annotated[int, typer.Option(min=1)] = 256,
    tensor_parallel: Annotated[int, typer.Option(min=1)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Plan as JSON.")] = False,
) -> None:
    """Print the staged verl commands and the prerequisites checklist for a recipe family (nothing is run)."""
    try:
        result = plan(
            family,
            stage,
            model,
            nodes,
            gpus_per_node,
            gpu_type=gpu_type,
            rollout_n=rollout_n,
            train_batch_size=train_batch_size,
            tensor_parallel=tensor_parallel,
        )
    except ValueError as exc:
        typer.echo(f"error: {exc}", err=True)
        raise typer.Exit(2) from None
    typer.echo(result.model_dump_json(indent=2) if as_json else result.render())


@app.command("check-inputs")
def check_inputs_command(
    experience: Annotated[
        list[Path] | None, typer.Option(help="Experience list (.json/.jsonl); repeatable.")
    ] = None,
    system_prompt: Annotated[
        list[Path] | None, typer.Option(help="System-prompt text file; repeatable.")
    ] = None,
    data_root: Annotated[
        list[Path] | None, typer.Option(help="Folder with train.jsonl etc.; repeatable.")
    ] = None,
) -> None:
    """Validate inputs without loading any model; exit 1 and list every problem (file:line: what) if any."""
    if not (experience or system_prompt or data_root):
        typer.echo("error: nothing to check; pass --experience, --system-prompt and/or --data-root", err=True)
        raise typer.Exit(2)
    report = check_inputs(experience or [], system_prompt or [], data_root or [])
    for problem in report.problems:
        typer.echo(str(problem))
    if not report.ok:
        typer.echo(f"{len(report.problems)} problem(s) in {len(report.checked)} input(s)", err=True)
        raise typer.Exit(1)
    typer.echo(f"ok: {len(report.checked)} input(s) checked, no problems")
