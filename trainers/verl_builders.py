"""What a verl family builder reads and returns, the registry that names the families, and the pieces they share.

A family is one function `build(ctx) -> FamilyPlan` plus one registration (`@family("name", "stage", ...)`, or an
entry point in the `rlloop.verl_families` group): the function writes the family's stages in order, and the extra
prerequisites and notes only that family has; `trainers.verl_plan.plan` adds what every plan shares (validation,
the cluster checklist, credentials, placeholders, roots, what is left unresolved). The registration also names the
family's tracks and the aliases its stages answer to (rlloop's older stage names). The built-in families are in
`trainers.verl_families`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib import import_module

from pydantic import BaseModel, Field

from tasks.plugins import Registry

MAIN_PPO = "verl.trainer.main_ppo"
GENERATION = "verl.trainer.main_generation"
EVALUATION = "verl.trainer.main_eval"
SFT = "verl.trainer.fsdp_sft_trainer"
MERGER = "verl.model_merger"
TRACKS = ("math", "text-game", "system-prompt")  # OPCD's three; a family names the ones it has
PROMPT_TYPES = ("safety", "medmcqa")  # the system prompts OPCD distils (system-prompt track)
BENCHMARK_REWARD = (
    "custom_reward_function.path=<VERL_EXT>/benchmark_reward.py"  # rlloop's scorer as a verl reward
)


class Stage(BaseModel):
    """One command of the plan, in order."""

    name: str
    description: str
    command: str
    overrides: list[str] = Field(default_factory=list)  # the Hydra overrides inside `command`, one per item
    heavy: list[str] = Field(default_factory=list)  # what running it would start (GPU, Ray, vLLM, W&B, ...)
    needs: list[str] = Field(default_factory=list)  # credentials it needs: wandb, hf, openai
    roles: dict[str, str] = Field(default_factory=dict)  # model role -> its value, where `command` uses it
    status: str = "not executed"  # the planner never runs a stage


class Prerequisite(BaseModel):
    """Something to confirm before running; `check` is a command that confirms it, when there is one."""

    item: str
    detail: str
    check: str | None = None


@dataclass(frozen=True)
class Checkpoints:
    """One checkpoint step (`200`) or a range (`100-500`, every `step`: `100-500:100`)."""

    first: int
    last: int
    step: int

    @classmethod
    def parse(cls, text: str) -> Checkpoints:
        found = re.fullmatch(r"(\d+)(?:-(\d+)(?::(\d+))?)?", text.strip())
        if not found:
            raise ValueError(
                f"checkpoint step {text!r}: give N, A-B or A-B:STEP (for example 200 or 100-500:100)"
            )
        first = int(found[1])
        last = int(found[2] or first)
        step = int(found[3] or (last - first if last > first else 1))
        if last < first or step < 1:
            raise ValueError(
                f"checkpoint range {text!r}: the end must not be before the start, the step >= 1"
            )
        return cls(first, last, step)

    @property
    def label(self) -> str:
        """verl's checkpoint folder name (`global_step_N`; `$step` inside the loop of a range)."""
        return f"global_step_{self.first}" if self.first == self.last else "global_step_$step"

    def loop(self, command: str) -> str:
        """`command` once, or for every step of the range."""
        if self.first == self.last:
            return command
        return f"for step in $(seq {self.first} {self.step} {self.last}); do {command}; done"


@dataclass(frozen=True)
class Roles:
    """The model roles besides the policy (`PlanContext.model`); None where the user named none."""

    reference: str | None = None  # reference / teacher
    coach: str | None = None  # experiential / coach model
    reward: str | None = None  # reward model / discriminator
    checkpoint: Checkpoints | None = None

    def given(self) -> dict[str, str]:
        named = {"reference": self.reference, "coach": self.coach, "reward": self.reward}
        return {k: v for k, v in named.items() if v is not None}


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
    track: str | None = None
    experience_path: str | None = None  # the context to distil: an experience list or a system-prompt file
    prompt_type: str | None = None  # system-prompt track: which prompt (safety, medmcqa)
    roles: Roles = field(default_factory=Roles)

    @property
    def data_dir(self) -> str:
        """<DATA_ROOT>, or its folder for the track (and the prompt type, on the system-prompt track)."""
        if self.track is None:
            return "<DATA_ROOT>"
        if self.track == "system-prompt":
            return f"<DATA_ROOT>/system-prompt/{self.prompt_type or '<PROMPT_TYPE>'}"
        return f"<DATA_ROOT>/{self.track}"

    def data_file(self, name: str) -> str:
        return f"{self.data_dir}/{name}"

    def context_file(self, default: str = "<DATA_ROOT>/experience.json") -> str:
        """What the teacher reads in context: --experience-path, else the track's default."""
        if self.experience_path:
            return self.experience_path
        if self.track == "system-prompt":
            return "<PROMPT_FILE>"
        return default if self.track is None else self.data_file("experience.json")

    def track_overrides(self) -> list[str]:
        """Text games are multi-turn: verl's multi-turn rollout with rlloop's game interaction."""
        if self.track != "text-game":
            return []
        return [
            "actor_rollout_ref.rollout.multi_turn.enable=True",
            "actor_rollout_ref.rollout.multi_turn.interaction_config_path=<VERL_EXT>/text_game_interaction.yaml",
        ]

    def common(self, *, model: str | None = None, checkpoint_dir: bool = True) -> list[str]:
        """The `main_ppo` overrides every RL stage shares: data, rollout, cluster, logging, and (unless a stage
        sets its own, after its other overrides) where checkpoints go. `model` replaces the policy's start."""
        overrides = [
            f"data.train_files={self.data_file('train.parquet')}",
            f"data.val_files={self.data_file('valid.parquet')}",
            f"data.train_batch_size={self.train_batch_size}",
            f"data.max_prompt_length={self.max_prompt_length}",
            f"data.max_response_length={self.max_response_length}",
            f"actor_rollout_ref.model.path={model or self.model}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={self.rollout_n}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={self.tensor_parallel}",
            "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
            "actor_rollout_ref.actor.strategy=fsdp",
            *self.track_overrides(),
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

    def sft(
        self, train: str, val: str, response_key: str, model: str, out: str, experiment: str
    ) -> list[str]:
        """The `fsdp_sft_trainer` overrides: what to read, from which model, where to write, on which cluster."""
        return [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.prompt_key=prompt",
            f"data.response_key={response_key}",
            f"model.partial_pretrain={model}",
            f"trainer.default_local_dir={out}",
            f"trainer.n_gpus_per_node={self.gpus_per_node}",
            f"trainer.nnodes={self.nodes}",
            "trainer.project_name=rlloop",
            f"trainer.experiment_name={experiment}",
        ]

    def torchrun(self) -> str:
        return f"torchrun --nnodes={self.nodes} --nproc_per_node={self.gpus_per_node} -m"


@dataclass
class FamilyPlan:
    """What a builder returns: its stages in order, and the prerequisites, notes and unresolved items (what the
    user still has to prepare) only this family has."""

    stages: list[Stage]
    prerequisites: list[Prerequisite] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    unresolved: list[str] = field(default_factory=list)


Build = Callable[[PlanContext], FamilyPlan]


@dataclass(frozen=True)
class FamilyBuilder:
    """A registered family: its stage names (what `--stage` accepts, in order), the function that plans them, the
    other names its stages answer to (`aliases`: alias -> stage) and the tracks it has (none: `--track` refused)."""

    name: str
    stages: tuple[str, ...]
    build: Build
    aliases: Mapping[str, str] = field(default_factory=dict)
    tracks: tuple[str, ...] = ()

    def resolve(self, stage: str) -> str | None:
        """The stage `stage` names (itself, its spelling with '-' for ' ' or '_' in any case, or an alias)."""
        spelled = re.sub(r"[ _]+", "-", stage.strip().lower())
        for name in (stage, spelled):
            if name in self.stages:
                return name
            if name in self.aliases:
                return self.aliases[name]
        return None

    def choices(self) -> str:
        aliases = ", ".join(f"{alias} (= {stage})" for alias, stage in self.aliases.items())
        return ", ".join(self.stages) + (f"; aliases: {aliases}" if aliases else "")


def _builtin_families() -> None:
    import_module("trainers.verl_families")  # its `@family` decorators register the built-ins


FAMILIES: Registry[FamilyBuilder] = Registry(
    "family", "rlloop.verl_families", builtins=_builtin_families, hint="see `rlloop plan --help`"
)


def family(
    name: str, *stages: str, aliases: Mapping[str, str] | None = None, tracks: tuple[str, ...] = ()
) -> Callable[[Build], Build]:
    """Register the decorated function as the builder of family `name`, whose stages are `stages`, in order."""

    def register(build: Build) -> Build:
        builder = FamilyBuilder(name, stages, build, dict(aliases or {}), tracks)
        FAMILIES.register(name, builder, origin=build.__module__)
        return build

    return register


def command(module: str, overrides: list[str], *, launcher: str = "python -m") -> str:
    """`launcher module` and the overrides, one per line; an override with shell metacharacters is quoted."""
    return " \\\n    ".join(
        [f"{launcher} {module}", *(shlex.quote(o) if set(o) & set(" []*?") else o for o in overrides)]
    )


def verl_stage(
    name: str,
    description: str,
    module: str,
    overrides: list[str],
    launcher: str = "python -m",
) -> Stage:
    """A stage that is one verl entry point with Hydra overrides."""
    return Stage(
        name=name,
        description=description,
        command=command(module, overrides, launcher=launcher),
        overrides=overrides,
    )


def chained(name: str, description: str, parts: list[tuple[str, list[str]]], **fields: object) -> Stage:
    """A stage of several commands run one after the other; `parts` are (command, its Hydra overrides). An
    override two parts share (the cluster's shape) is listed once."""
    overrides = list(dict.fromkeys(o for _, part in parts for o in part))
    return Stage.model_validate(
        {
            "name": name,
            "description": description,
            "command": " && ".join(c for c, _ in parts),
            "overrides": overrides,
            **fields,
        }
    )


def merge(actor_dir: str) -> tuple[str, str]:
    """verl's model merger: FSDP shards of `actor_dir` -> a Hugging Face folder; (command, that folder)."""
    merged = f"{actor_dir}/huggingface"
    return f"python -m {MERGER} merge --backend fsdp --local_dir {actor_dir} --target_dir {merged}", merged


def checkpoint(ctx: PlanContext, run_dir: str) -> tuple[str, str]:
    """The merge of the checkpoint the user chose under `run_dir` (placeholder step when none); (merge, model)."""
    label = ctx.roles.checkpoint.label if ctx.roles.checkpoint else "global_step_<STEP>"
    return merge(f"{run_dir}/{label}/actor")


def loop(ctx: PlanContext, text: str) -> str:
    """`text` for the chosen checkpoint, or for every one of a range."""
    return ctx.roles.checkpoint.loop(text) if ctx.roles.checkpoint else text


def check_inputs_stage(ctx: PlanContext | None = None) -> Stage:
    """`rlloop check-inputs` on the experience list (or system prompt) and the data root, before any GPU is used."""
    if ctx is None or (ctx.track is None and ctx.experience_path is None):
        what = "--experience <DATA_ROOT>/experience.json --data-root <DATA_ROOT>"
    elif ctx.track == "system-prompt":
        prompt = ctx.prompt_type or "<PROMPT_TYPE>"
        what = f"--system-prompt-file {ctx.context_file()} --prompt-type {prompt} --strict --data-root {ctx.data_dir}"
    else:
        what = f"--experience {ctx.context_file()} --data-root {ctx.data_dir}"
    return Stage(
        name="check-inputs",
        description="validate the experience list / system prompt and the data root, without loading a model",
        command=f"rlloop check-inputs {what}",
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


def distill_overrides(context_file: str, top_k: int, ctx: PlanContext | None = None) -> list[str]:
    """rlloop's OPCD extension: top-k reverse KL against the frozen reference that reads `context_file` (the
    start model, or the teacher the user named)."""
    teacher = ctx.roles.reference if ctx else None
    prompt_type = ctx.prompt_type if ctx and ctx.track == "system-prompt" else None
    return [
        "+rlloop.distill.mode=opcd",
        f"+rlloop.distill.context_file={context_file}",
        f"+rlloop.distill.top_k={top_k}",
        "+rlloop.distill.teacher=ref",
        *([f"+rlloop.distill.teacher_path={teacher}"] if teacher else []),
        *([f"+rlloop.distill.prompt_type={prompt_type}"] if prompt_type else []),
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
        *distill_overrides(context_file, ctx.top_k, ctx),
        *([f"trainer.default_local_dir={checkpoint_dir}"] if checkpoint_dir else []),
    ]
    return verl_stage(name, description, MAIN_PPO, overrides)


def distill_note(top_k: int) -> str:
    return f"The distillation loss is top-k reverse KL (k={top_k}) against the frozen reference given the context."
