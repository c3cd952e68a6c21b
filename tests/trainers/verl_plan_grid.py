"""The grid of planner inputs whose outputs `fixtures/verl_plans.json` pins (captured from the one-function planner
before it became one builder per family; re-recorded when issue 17 added the LMOps stage names, tracks, roles,
roots, credentials and the unresolved list), and how to record one. Run `python -m tests.trainers.verl_plan_grid`
to rewrite the fixture; do that only when a plan is meant to change, and review the diff. Plans are recorded with an
empty environment, so no variable set on the recording machine leaks into them."""

from __future__ import annotations

import shlex
from pathlib import Path
from typing import Any

from typer.testing import CliRunner

from tasks.atomic import atomic_write_json
from trainers.verl.cli import app
from trainers.verl.plan import FAMILIES, FAMILY_TRACKS, STAGES, plan
from trainers.verl.resolve import CREDENTIALS, ROOTS

FIXTURE = Path(__file__).parent / "fixtures" / "verl_plans.json"
LMOPS_COMMANDS = (
    Path(__file__).parent / "fixtures" / "lmops_commands.txt"
)  # the seed document's command lines
SEED_PLAN = LMOPS_COMMANDS.read_text(encoding="utf-8").splitlines()[0].split(".py ", 1)[1]

VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "two_nodes": {"nodes": 2, "gpus_per_node": 8},
    "batch_128": {"train_batch_size": 128},
    "hub_model_console": {"model": "Qwen/Qwen2.5-0.5B-Instruct", "loggers": ["console"]},
    "model_root": {"model": "<MODEL_ROOT>/m"},
    "relative_model": {"model": "./local/model", "loggers": []},
    "absolute_model": {"model": "/models/base", "loggers": ["wandb"]},
    "every_knob": {
        "nodes": 3,
        "gpus_per_node": 4,
        "gpu_type": "NVIDIA A100 80GB",
        "rollout_n": 4,
        "train_batch_size": 3,
        "max_prompt_length": 512,
        "max_response_length": 4096,
        "tensor_parallel": 2,
        "top_k": 64,
        "rounds": 5,
        "loggers": ["console", "wandb", "mlflow"],
        "experiment": "exp one",
    },
}

# the flags issue 17 added, all at once (each family's tracks are crossed with them in `cases`)
ROLES: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "reference": "<MODEL_ROOT>/teacher",
    "coach": "gpt-4o",
    "reward_model": "<MODEL_ROOT>/discriminator",
    "checkpoint_step": "100-300:100",
    "gpu_class": "B200",
    "checkout": "<CHECKOUT>",
    "credentials": ["wandb", "hf", "openai"],
    "roots": {"<DATA_ROOT>": "/shared/data", "<CKPT_ROOT>": "/shared/ckpt"},
    "experiment": "exp-17",
}

ERRORS: dict[str, dict[str, Any]] = {
    "unknown_family": {"family": "ppo"},
    "unknown_stage": {"family": "gad", "stage": "x"},
    "stage_of_other_family": {"family": "grpo", "stage": "distill"},
    "track_of_other_family": {"family": "gad", "track": "math"},
    "unknown_track": {"family": "opcd", "track": "chess"},
    "prompt_type_without_track": {"family": "opcd", "prompt_type": "safety"},
    "unknown_prompt_type": {"family": "opcd", "track": "system-prompt", "prompt_type": "legal"},
    "unknown_gpu_class": {"family": "opo", "gpu_class": "V100"},
    "unknown_credential": {"family": "opo", "credentials": ["aws"]},
    "bad_checkpoint": {"family": "gad", "checkpoint_step": "300-100"},
    "tp_does_not_divide": {"family": "grpo", "gpus_per_node": 8, "tensor_parallel": 3},
    "zero_nodes": {"family": "opo", "nodes": 0},
    "zero_gpus": {"family": "oel", "gpus_per_node": 0},
    "batch_gpus_do_not_divide": {"family": "grpo", "train_batch_size": 3, "rollout_n": 4, "gpus_per_node": 8},
}

CLI: dict[str, list[str]] = {
    "oel_json": ["plan", "--family", "oel", "--nodes", "2", "--json"],
    "grpo_text": ["plan", "--family", "grpo"],
    "coach_stage_json": [
        "plan",
        "--family",
        "coach",
        "--stage",
        "rl_baseline",
        "--tensor-parallel",
        "2",
        "--json",
    ],
    "gad_knobs": [
        "plan",
        "--family",
        "gad",
        "--model",
        "org/m",
        "--rollout-n",
        "2",
        "--train-batch-size",
        "16",
    ],
    "unknown_family": ["plan", "--family", "nope"],
    "unknown_stage": ["plan", "--family", "opcd", "--stage", "rollout"],
    "seed_document": ["plan", *shlex.split(SEED_PLAN)],  # the LMOps document's planner line, as written
    "unknown_flag": ["plan", "--family", "opcd", "--backend", "megatron"],
    "coach_roles_json": [
        "plan",
        *shlex.split("--family coach --stage score --coach gpt-4o --checkpoint-step 200 --gpu-class h100"),
        *shlex.split("--credentials openai --result-root /shared/results --json"),
    ],
}

CLEAN_ENV: dict[str, str | None] = {
    **{variable: None for _, variable in ROOTS.values()},
    **{variable: None for _, variables, _ in CREDENTIALS.values() for variable in variables},
}


def cases() -> dict[str, dict[str, Any]]:
    """Every family with every variant over all its stages, every stage alone, and the refused inputs."""
    grid: dict[str, dict[str, Any]] = {}
    for family, stages in STAGES.items():
        for variant, kwargs in VARIANTS.items():
            grid[f"{family}/all/{variant}"] = {"family": family, **kwargs}
        for stage in stages:
            grid[f"{family}/{stage}/default"] = {"family": family, "stage": stage}
            grid[f"{family}/{stage}/every_knob"] = {
                "family": family,
                "stage": stage,
                **VARIANTS["every_knob"],
            }
        for alias in FAMILIES.get(family).aliases:
            grid[f"{family}/{alias}/default"] = {"family": family, "stage": alias}
        for track in [None, *FAMILY_TRACKS[family]]:
            tracked = {} if track is None else {"track": track}
            if track == "system-prompt":
                tracked |= {"prompt_type": "safety", "experience_path": "<DATA_ROOT>/safety.txt"}
            grid[f"{family}/all/roles{'' if track is None else '_' + track}"] = {
                "family": family,
                **tracked,
                **ROLES,
            }
    grid.update({f"error/{name}": kwargs for name, kwargs in ERRORS.items()})
    return grid


def record(kwargs: dict[str, Any], *, text: bool = False) -> dict[str, Any]:
    """What the planner answers for `kwargs`: the plan as JSON (and as text when `text`), or the ValueError's
    message."""
    call: dict[str, Any] = {k: tuple(v) if k == "loggers" else v for k, v in kwargs.items()} | {"env": {}}
    try:
        result = plan(**call)
    except ValueError as exc:
        return {"error": str(exc)}
    return {"plan": result.model_dump(mode="json")} | ({"text": result.render()} if text else {})


def record_cli(args: list[str]) -> dict[str, Any]:
    """What `rlloop plan args...` prints and exits with."""
    out = CliRunner().invoke(app, args, env=CLEAN_ENV)
    return {"exit_code": out.exit_code, "output": out.output}


def with_text(name: str) -> bool:
    """The rendered text is pinned for a few cases only (it is a function of the plan; the fixture stays small)."""
    return name.endswith(("/all/default", "/all/every_knob", "/all/roles"))


def snapshot() -> dict[str, Any]:
    return {
        "plans": {name: record(kwargs, text=with_text(name)) for name, kwargs in cases().items()},
        "cli": {name: record_cli(args) for name, args in CLI.items()},
    }


if __name__ == "__main__":
    atomic_write_json(FIXTURE, snapshot(), indent=1, sort_keys=True)
    print(f"wrote {FIXTURE}")
