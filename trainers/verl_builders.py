"""What a verl family builder reads and returns, the registry that names the families, and the pieces they share.

A family is one function `build(ctx) -> FamilyPlan` plus one registration (`@family("name", "stage", ...)`, or an
entry point in the `rlloop.verl_families` group): the function writes the family's stages in order, and the extra
prerequisites and notes only that family has; `trainers.verl_plan.plan` adds what every plan shares (validation,
the cluster checklist, credentials, placeholders). The built-in families are in `trainers.verl_families`.
"""

from __future__ import annotations

import shlex
from collections.abc import Callable
from dataclasses import dataclass, field
from importlib import import_module

from pydantic import BaseModel, Field

from tasks.plugins import Registry

MAIN_PPO = "verl.trainer.main_ppo"
GENERATION = "verl.trainer.main_generation"
EVALUATION = "verl.trainer.main_eval"
SFT = "verl.trainer.fsdp_sft_trainer"
BENCHMARK_REWARD = (
    "custom_reward_function.path=<VERL_EXT>/benchmark_reward.py"  # rlloop's scorer as a verl reward
)


class Stage(BaseModel):
    """One command of the plan, in order."""

    name: str
    description: str
    command: str
    overrides: list[str] = Field(default_factory=list)  # the Hydra overrides inside `command`, one per item


class Prerequisite(BaseModel):
    """Something to confirm before running; `check` is a command that confirms it, when there is one."""

    item: str
    detail: str
    check: str | None = None


@dataclass(frozen=True)
class PlanContext:
    """The validated inputs every builder reads: the cluster's shape, the model, the RL knobs, the run's name."""

    model: str
    nodes: int
    gpus_per_node: int
    gpu_type: str
    rollout_n: int
    train_batch_size: int
    max_prompt_length: int
    max_response_length: int
    tensor_parallel: int
    top_k: int
    rounds: int
    loggers: tuple[str, ...]
    experiment: str

    def common(self, *, model: str | None = None, checkpoint_dir: bool = True) -> list[str]:
        """The `main_ppo` overrides every RL stage shares: data, rollout, cluster, logging, and (unless a stage
        sets its own, after its other overrides) where checkpoints go. `model` replaces the policy's start."""
        overrides = [
            "data.train_files=<DATA_ROOT>/train.parquet",
            "data.val_files=<DATA_ROOT>/valid.parquet",
            f"data.train_batch_size={self.train_batch_size}",
            f"data.max_prompt_length={self.max_prompt_length}",
            f"data.max_response_length={self.max_response_length}",
            f"actor_rollout_ref.model.path={model or self.model}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={self.rollout_n}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={self.tensor_parallel}",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
            "actor_rollout_ref.actor.strategy=fsdp",
            *self.cluster(),
            f"trainer.logger=[{','.join(self.loggers)}]",
            "trainer.project_name=rlloop",
            f"trainer.experiment_name={self.experiment}",
        ]
        return overrides + (
            [f"trainer.default_local_dir=<CKPT_ROOT>/{self.experiment}"] if checkpoint_dir else []
        )

    def cluster(self) -> list[str]:
        return [f"trainer.nnodes={self.nodes}", f"trainer.n_gpus_per_node={self.gpus_per_node}"]

    def generation(self, data: str, output: str, model: str) -> list[str]:
        """The `main_generation` overrides that say where to run, what to read and write, and with which model."""
        return [*self.cluster(), f"data.path={data}", f"data.output_path={output}", f"model.path={model}"]


@dataclass
class FamilyPlan:
    """What a builder returns: its stages in order, and the prerequisites and notes only this family has."""

    stages: list[Stage]
    prerequisites: list[Prerequisite] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


Build = Callable[[PlanContext], FamilyPlan]


@dataclass(frozen=True)
class FamilyBuilder:
    """A registered family: its stage names (what `--stage` accepts, in order) and the function that plans them.
    What else the planner learns per family (stage aliases, tracks, what each stage needs) belongs here too."""

    name: str
    stages: tuple[str, ...]
    build: Build


def _builtin_families() -> None:
    import_module("trainers.verl_families")  # its `@family` decorators register the built-ins


FAMILIES: Registry[FamilyBuilder] = Registry(
    "family", "rlloop.verl_families", builtins=_builtin_families, hint="see `rlloop plan --help`"
)


def family(name: str, *stages: str) -> Callable[[Build], Build]:
    """Register the decorated function as the builder of family `name`, whose stages are `stages`, in order."""

    def register(build: Build) -> Build:
        FAMILIES.register(name, FamilyBuilder(name, stages, build), origin=build.__module__)
        return build

    return register


def command(module: str, overrides: list[str], *, launcher: str = "python -m") -> str:
    """`launcher module` and the overrides, one per line; an override with shell metacharacters is quoted."""
    return " \\\n    ".join(
        [f"{launcher} {module}", *(shlex.quote(o) if set(o) & set(" []*?") else o for o in overrides)]
    )


def verl_stage(
    name: str, description: str, module: str, overrides: list[str], launcher: str = "python -m"
) -> Stage:
    """A stage that is one verl entry point with Hydra overrides."""
    return Stage(
        name=name,
        description=description,
        command=command(module, overrides, launcher=launcher),
        overrides=overrides,
    )


def check_inputs_stage() -> Stage:
    """`rlloop check-inputs` on the experience list and the data root, before any GPU is used."""
    return Stage(
        name="check_inputs",
        description="validate the experience list / system prompt and the data root, without loading a model",
        command="rlloop check-inputs --experience <DATA_ROOT>/experience.json --data-root <DATA_ROOT>",
    )


def single_pass(batch: int) -> list[str]:
    """One optimiser step per rollout batch: mini-batch = batch, one epoch."""
    return [f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}", "actor_rollout_ref.actor.ppo_epochs=1"]


def exact_on_policy(batch: int) -> list[str]:
    """One optimiser step per rollout batch, and no KL or entropy terms."""
    return [
        *single_pass(batch),
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "algorithm.use_kl_in_reward=False",
    ]


def distill_overrides(context_file: str, top_k: int) -> list[str]:
    """rlloop's OPCD extension: top-k reverse KL against the frozen reference that reads `context_file`."""
    return [
        "+rlloop.distill.mode=opcd",
        f"+rlloop.distill.context_file={context_file}",
        f"+rlloop.distill.top_k={top_k}",
        "+rlloop.distill.teacher=ref",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "custom_reward_function.path=<VERL_EXT>/opcd.py",
    ]


def distill_stage(
    ctx: PlanContext, name: str, description: str, context_file: str, *, checkpoint_dir: str | None = None
) -> Stage:
    """On-policy context distillation of `context_file` into the weights; `checkpoint_dir` overrides where the
    checkpoints go (a round's folder)."""
    overrides = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(checkpoint_dir=checkpoint_dir is None),
        *single_pass(ctx.train_batch_size),
        *distill_overrides(context_file, ctx.top_k),
        *([f"trainer.default_local_dir={checkpoint_dir}"] if checkpoint_dir else []),
    ]
    return verl_stage(name, description, MAIN_PPO, overrides)


def distill_note(top_k: int) -> str:
    return f"The distillation loss is top-k reverse KL (k={top_k}) against the frozen reference given the context."
