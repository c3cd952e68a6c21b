"""`plan` and `check-inputs`: scale-out planning and input validation, as a Typer sub-app for `rlloop`.

Neither command runs training or loads a model: `plan` prints the staged verl commands, their checklist and what
is still unresolved, `check-inputs` reports every problem in experience lists, system prompts and data roots with
file and line. Both accept the command lines of the LMOps experiential-learning planner and checker (the
`verl_experiment_planner.py` / `check_experience_inputs.py` flags), and refuse an unknown flag with the valid ones.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Any, NoReturn

import typer
from typer.core import TyperCommand

from trainers.verl.check_inputs import PROMPT_TYPES, check_inputs
from trainers.verl.plan import FAMILY_TRACKS, STAGES, family_names, plan
from trainers.verl.resolve import CREDENTIALS, GPU_CLASSES, ROOTS


class ListingCommand(TyperCommand):
    """A command that answers an unknown option with every option it does accept."""

    def parse_args(self, ctx: Any, args: list[str]) -> list[str]:
        try:
            return super().parse_args(ctx, args)
        except Exception as exc:  # Typer ships its own click: match its NoSuchOption by name
            if type(exc).__name__ != "NoSuchOption":
                raise
            valid = sorted(
                {o for p in self.params for o in (*p.opts, *p.secondary_opts) if o.startswith("--")}
            )
            exc.message = f"No such option: {exc.option_name}; valid options: {', '.join(valid)}"  # type: ignore[attr-defined]
            exc.possibilities = None  # type: ignore[attr-defined]
            raise


app = typer.Typer(add_completion=False, no_args_is_help=True, help=__doc__, pretty_exceptions_enable=False)

_STAGE_HELP = "'all' or one stage: " + "; ".join(f"{f}: {', '.join(s)}" for f, s in STAGES.items())
_TRACK_HELP = "; ".join(f"{f}: {', '.join(t)}" for f, t in FAMILY_TRACKS.items() if t)


@app.command("plan", cls=ListingCommand)
def plan_command(
    family: Annotated[str, typer.Option("--family", help=f"One of: {', '.join(family_names())}.")],
    stage: Annotated[str, typer.Option(help=_STAGE_HELP + " (rlloop's older names are aliases).")] = "all",
    track: Annotated[str | None, typer.Option(help=f"The family's track ({_TRACK_HELP}).")] = None,
    model: Annotated[
        str, typer.Option(help="Policy / student model: path (use <MODEL_ROOT>/...) or hub id.")
    ] = "<MODEL_ROOT>/base",
    policy: Annotated[str | None, typer.Option(help="Same as --model (the policy / student).")] = None,
    reference: Annotated[
        str | None, typer.Option("--reference", "--teacher", help="Reference / teacher model.")
    ] = None,
    coach: Annotated[str | None, typer.Option(help="Experiential / coach model (also the scorer).")] = None,
    reward_model: Annotated[
        str | None,
        typer.Option("--reward-model", "--discriminator", help="Reward model / discriminator."),
    ] = None,
    checkpoint_step: Annotated[
        str | None, typer.Option(help="Checkpoint step to evaluate: N, or a range A-B[:STEP].")
    ] = None,
    exp_name: Annotated[
        str | None,
        typer.Option("--exp-name", "--experiment", help="Experiment name (trainer.experiment_name)."),
    ] = None,
    prompt_type: Annotated[
        str | None, typer.Option(help=f"System-prompt track: {', '.join(PROMPT_TYPES)}.")
    ] = None,
    experience_path: Annotated[
        str | None, typer.Option(help="Experience list or system-prompt file the teacher reads in context.")
    ] = None,
    nodes: Annotated[int, typer.Option(min=1)] = 1,
    gpus_per_node: Annotated[int, typer.Option(min=1)] = 8,
    gpu_class: Annotated[
        str | None, typer.Option(help=f"{', '.join(GPU_CLASSES)}: picks the setup path (B200 vs the others).")
    ] = None,
    gpu_type: Annotated[
        str | None, typer.Option(help="GPU name in the checklist (default from --gpu-class).")
    ] = None,
    credentials: Annotated[
        str | None,
        typer.Option(
            help=f"Comma-separated credential intent ({', '.join(CREDENTIALS)}); checked for presence."
        ),
    ] = None,
    checkout: Annotated[str | None, typer.Option(help="The target checkout the commands run in.")] = None,
    model_root: Annotated[str | None, typer.Option(help="<MODEL_ROOT> (else $RLLOOP_MODEL_ROOT).")] = None,
    data_root: Annotated[str | None, typer.Option(help="<DATA_ROOT> (else $RLLOOP_DATA_ROOT).")] = None,
    ckpt_root: Annotated[str | None, typer.Option(help="<CKPT_ROOT> (else $RLLOOP_CKPT_ROOT).")] = None,
    result_root: Annotated[str | None, typer.Option(help="<RESULT_ROOT> (else $RLLOOP_RESULT_ROOT).")] = None,
    rollout_n: Annotated[int, typer.Option(min=1, help="Samples per prompt.")] = 8,
    train_batch_size: Annotated[int, typer.Option(min=1)] = 256,
    tensor_parallel: Annotated[int, typer.Option(min=1)] = 1,
    as_json: Annotated[bool, typer.Option("--json", help="Print the Plan as JSON.")] = False,
) -> None:
    """Print the staged verl commands, the prerequisites checklist and what is unresolved for a recipe family
    (nothing is run, imported from verl or downloaded)."""
    if policy is not None and model not in ("<MODEL_ROOT>/base", policy):
        _refuse("--policy and --model name the same role; give one")
    flags = {"--model-root": model_root, "--data-root": data_root, "--ckpt-root": ckpt_root}
    flags["--result-root"] = result_root
    given = {placeholder: flags[flag] for placeholder, (flag, _) in ROOTS.items()}
    try:
        result = plan(
            family,
            stage,
            policy or model,
            nodes,
            gpus_per_node,
            gpu_type=gpu_type,
            rollout_n=rollout_n,
            train_batch_size=train_batch_size,
            tensor_parallel=tensor_parallel,
            experiment=exp_name,
            track=track,
            experience_path=experience_path,
            prompt_type=prompt_type,
            reference=reference,
            coach=coach,
            reward_model=reward_model,
            checkpoint_step=checkpoint_step,
            gpu_class=gpu_class,
            checkout=checkout,
            credentials=None if credentials is None else credentials.split(","),
            roots=given,
        )
    except ValueError as exc:
        _refuse(str(exc))
    typer.echo(result.model_dump_json(indent=2) if as_json else result.render())


def _refuse(message: str) -> NoReturn:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


@app.command("check-inputs", cls=ListingCommand)
def check_inputs_command(
    experience: Annotated[
        list[Path] | None, typer.Option(help="Experience list (.json/.jsonl); repeatable.")
    ] = None,
    system_prompt: Annotated[
        list[Path] | None,
        typer.Option("--system-prompt", "--system-prompt-file", help="System-prompt text file; repeatable."),
    ] = None,
    data_root: Annotated[
        list[Path] | None, typer.Option(help="Folder with train.jsonl etc.; repeatable.")
    ] = None,
    prompt_type: Annotated[
        str | None,
        typer.Option(
            help=f"What the system prompts are for ({', '.join(PROMPT_TYPES)}); checked against them."
        ),
    ] = None,
    strict: Annotated[bool, typer.Option(help="Warnings count as problems (exit 1).")] = False,
    as_json: Annotated[bool, typer.Option("--json", help="Print the report as JSON.")] = False,
) -> None:
    """Validate inputs without loading any model; exit 1 and list every problem (file:line: what) if any."""
    if not (experience or system_prompt or data_root):
        typer.echo(
            "error: nothing to check; pass --experience, --system-prompt(-file) and/or --data-root", err=True
        )
        raise typer.Exit(2)
    if prompt_type is not None and prompt_type not in PROMPT_TYPES:
        _refuse(f"unknown prompt type {prompt_type!r}; choose one of {', '.join(PROMPT_TYPES)}")
    report = check_inputs(experience or [], system_prompt or [], data_root or [], prompt_type=prompt_type)
    failed = report.problems + (report.warnings if strict else [])
    if as_json:
        data: dict[str, Any] = report.model_dump(mode="json") | {"strict": strict, "ok": not failed}
        typer.echo(json.dumps(data, indent=2))
    else:
        for problem in report.problems:
            typer.echo(str(problem))
        for warning in report.warnings:
            typer.echo(f"{'error' if strict else 'warning'}: {warning}")
    if failed:
        if not as_json:
            typer.echo(f"{len(failed)} problem(s) in {len(report.checked)} input(s)", err=True)
        raise typer.Exit(1)
    if not as_json:
        warned = f", {len(report.warnings)} warning(s)" if report.warnings else ""
        typer.echo(f"ok: {len(report.checked)} input(s) checked, no problems{warned}")
