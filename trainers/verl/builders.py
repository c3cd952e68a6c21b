"""What a verl family builder reads and returns, the registry that names the families, and the pieces they share.

A family is one function `build(ctx) -> FamilyPlan` plus one registration (`@family("name", "stage", ...)`, or an
entry point in the `rlloop.verl_families` group): the function writes the family's stages in order, and the extra
prerequisites and notes only that family has; `trainers.verl.plan.plan` adds what every plan shares (validation,
the cluster checklist, credentials, placeholders, roots, what is left unresolved). The registration also names the
family's tracks and the aliases its stages answer to (rlloop's older stage names). The built-in families are in
`trainers.verl.families`.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from pydantic import BaseModel, Field

from tasks.plugins import Registry

MAIN_PPO = "verl.trainer.main_ppo"
GENERATION = "verl.trainer.main_generation_server"  # verl 0.9: the ppo_trainer config, rollout.n = samples
EVALUATION = "verl.trainer.main_eval"
SFT = "verl.trainer.sft_trainer"  # verl 0.9: sft_trainer_engine config, multi-turn `messages` data
MERGER = "verl.model_merger"
VERL_VERSION = "0.9.1"  # the verl release the plans are written for and checked against (tests/trainers/test_verl_accepts.py)
EXTENSIONS = (
    "trainers.verl.ext"  # rlloop's verl extension modules: imported by verl itself, see `extension_env`
)
TRACKS = ("math", "text-game", "system-prompt")  # OPCD's three; a family names the ones it has
PROMPT_TYPES = ("safety", "medmcqa")  # the system prompts OPCD distils (system-prompt track)
BENCHMARK_REWARD = (
    "reward.custom_reward_function.path=<VERL_EXT>/benchmark_reward.py"  # rlloop's scorer as a verl reward
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
    def run(self) -> str:
        """The experiment's name as a folder name (no spaces or shell characters): where its files go."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.experiment).strip("-") or "run"

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
        """Text games are multi-turn: verl's agent-loop rollout with rlloop's game loop (not written yet)."""
        if self.track != "text-game":
            return []
        return [
            "actor_rollout_ref.rollout.multi_turn.enable=True",
            "actor_rollout_ref.rollout.agent.agent_loop_config_path=<VERL_EXT>/text_game_agent_loop.yaml",
        ]

    def common(
        self, *, model: str | None = None, checkpoint_dir: bool = True, mini_batch: int | None = None
    ) -> list[str]:
        """The `main_ppo` overrides every RL stage shares: data, rollout, micro-batches (for the stage's
        `mini_batch`, default one step per batch), cluster, logging, and (unless a stage sets its own, after its
        other overrides) where checkpoints go. `model` replaces the policy's start."""
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
            *self.micro_batches(mini_batch or self.train_batch_size),
            *self.track_overrides(),
            *self.cluster(),
            f"trainer.logger=[{','.join(self.loggers)}]",
            "trainer.project_name=rlloop",
            f"trainer.experiment_name={self.experiment}",
        ]
        return overrides + ([f"trainer.default_local_dir=<CKPT_ROOT>/{self.run}"] if checkpoint_dir else [])

    def cluster(self) -> list[str]:
        return [f"trainer.nnodes={self.nodes}", f"trainer.n_gpus_per_node={self.gpus_per_node}"]

    @property
    def gpus(self) -> int:
        return self.nodes * self.gpus_per_node

    def per_gpu(self, mini_batch: int) -> int:
        """verl's normalised mini-batch: mini_batch x rollout.n sequences shared by every GPU (fsdp_workers)."""
        return mini_batch * self.rollout_n // self.gpus

    def micro_batches(self, mini_batch: int) -> list[str]:
        """The per-GPU micro-batches verl refuses to start without (actor update, rollout and reference
        log-probs): the largest of 4, 2, 1 that divides the normalised mini-batch."""
        micro = next(m for m in (4, 2, 1) if self.per_gpu(mini_batch) % m == 0)
        return [
            f"actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu={micro}",
            f"actor_rollout_ref.rollout.log_prob_micro_batch_size_per_gpu={micro}",
            f"actor_rollout_ref.ref.log_prob_micro_batch_size_per_gpu={micro}",
        ]

    def generation(
        self, data: str, output: str, model: str, *, samples: int = 1, greedy: bool = False
    ) -> list[str]:
        """The `main_generation_server` overrides (verl's ppo_trainer config): where to run, what to read and
        write, with which model, how many samples per prompt (`rollout.n`; one when greedy, which verl asserts)."""
        return [
            *self.cluster(),
            f"data.train_files={data}",
            f"+data.output_path={output}",  # read by main_generation_server, not in the ppo_trainer config
            f"actor_rollout_ref.model.path={model}",
            "actor_rollout_ref.rollout.name=vllm",
            f"actor_rollout_ref.rollout.n={1 if greedy else samples}",
            *(["actor_rollout_ref.rollout.temperature=0"] if greedy else []),
            f"actor_rollout_ref.rollout.response_length={self.max_response_length}",
            f"actor_rollout_ref.rollout.tensor_model_parallel_size={self.tensor_parallel}",
        ]

    def sft(self, train: str, val: str, model: str, out: str, experiment: str) -> list[str]:
        """The `sft_trainer` overrides: what to read (chat `messages` rows), from which model, where to write, on
        which cluster."""
        return [
            f"data.train_files={train}",
            f"data.val_files={val}",
            "data.messages_key=messages",
            f"model.path={model}",
            f"trainer.default_local_dir={out}",
            f"trainer.n_gpus_per_node={self.gpus_per_node}",
            f"trainer.nnodes={self.nodes}",
            "trainer.project_name=rlloop",
            f"trainer.experiment_name={experiment}",
        ]

    def torchrun(self) -> str:
        """One node: torchrun alone. Several: run the same command on every node with NODE_RANK set; they meet
        at the c10d rendezvous on the first node ($MASTER_ADDR:$MASTER_PORT)."""
        launcher = f"torchrun --nnodes={self.nodes} --nproc_per_node={self.gpus_per_node}"
        if self.nodes > 1:
            launcher += (
                " --node_rank=$NODE_RANK --rdzv_backend=c10d --rdzv_endpoint=$MASTER_ADDR:$MASTER_PORT "
                f"--rdzv_id={self.run}"
            )
        return launcher + " -m"


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


# the built-ins register themselves (`@family` in trainers.verl.families, which trainers.verl.plan, the registry's
# reader, imports); plugins through the entry point group. This module never loads the families that import it.
FAMILIES: Registry[FamilyBuilder] = Registry(
    "family", "rlloop.verl_families", hint="see `rlloop plan --help`"
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


def merge_latest(run_dir: str, role: str = "actor") -> tuple[str, str]:
    """The merge of the last checkpoint verl wrote under `run_dir` (its latest_checkpointed_iteration.txt) into
    `run_dir`/huggingface, for the next stage's model.path; (merge, that folder). `role` "" for SFT runs (no
    actor/ subfolder)."""
    step = f'{run_dir}/global_step_"$(cat {run_dir}/latest_checkpointed_iteration.txt)"'
    merged = f"{run_dir}/huggingface"
    local = f"{step}/{role}" if role else step
    return f"python -m {MERGER} merge --backend fsdp --local_dir {local} --target_dir {merged}", merged


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


def extension_env() -> list[str]:
    """rlloop's verl extensions reach every process verl starts: verl imports the modules named in
    VERL_USE_EXTERNAL_MODULES when it is imported (verl/__init__.py), here in the driver and, through Ray's
    runtime_env, in every worker."""
    return [f"+ray_kwargs.ray_init.runtime_env.env_vars.VERL_USE_EXTERNAL_MODULES={EXTENSIONS}.opcd"]


def distill_overrides() -> list[str]:
    """rlloop's OPCD on verl: the frozen reference (the start model) scores each sampled token, verl puts
    -(log p_student - log p_reference) into the token rewards (k1 KL in the reward, coefficient 1, no task
    reward), and the `opcd` advantage estimator (trainers.verl.ext.opcd) keeps it per token, which makes the
    policy gradient the sampled-token estimate of reverse KL(student || teacher). The in-process recipe's top-k
    needs the teacher's logits, which verl's policy loss does not see (the family's notes say so)."""
    return [
        "algorithm.use_kl_in_reward=True",
        "algorithm.kl_penalty=kl",
        "algorithm.kl_ctrl.type=fixed",
        "algorithm.kl_ctrl.kl_coef=1.0",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "reward.custom_reward_function.path=<VERL_EXT>/zero_reward.py",
        "reward.custom_reward_function.name=compute_score",
        *extension_env(),
    ]


def distill_stage(
    ctx: PlanContext, name: str, description: str, context_file: str, *, checkpoint_dir: str | None = None
) -> Stage:
    """On-policy context distillation of `context_file` into the weights; `checkpoint_dir` overrides where the
    checkpoints go (a round's folder)."""
    del context_file  # verl's reference cannot read it: see `context_gap`
    overrides = [
        "algorithm.adv_estimator=opcd",
        *ctx.common(checkpoint_dir=checkpoint_dir is None),
        *single_pass(ctx.train_batch_size),
        *distill_overrides(),
        *([f"trainer.default_local_dir={checkpoint_dir}"] if checkpoint_dir else []),
    ]
    return verl_stage(name, description, MAIN_PPO, overrides)


def distill_note(top_k: int) -> str:
    return (
        f"The in-process recipe's distillation loss is top-k reverse KL (k={top_k}) against the frozen teacher "
        "given the context; on verl it is the sampled-token estimate of the same reverse KL (advantage "
        "-(log p_student - log p_teacher) per token, trainers.verl.ext.opcd)."
    )


def teacher_gap(ctx: PlanContext) -> list[str]:
    """A teacher the user named cannot be the on-policy stages' reference: verl's is the policy's start model."""
    if ctx.roles.reference is None:
        return []
    return [
        f"teacher {ctx.roles.reference}: verl 0.9.1's reference (the on-policy teacher) is the policy's start "
        "model, actor_rollout_ref.model.path; the on-policy stages cannot use another one (the off-policy "
        "stage's generation does)"
    ]


def context_gap(context: str) -> str:
    """What stops the on-policy stages from being OPCD as the in-process recipe is: the teacher's context."""
    return (
        f"OPCD teacher context ({context}): verl 0.9.1's reference worker scores the student's own prompt, so "
        "the frozen teacher does not read the experience / system prompt in the on-policy stages; give it a "
        "reference that prepends the context (not in verl, not in rlloop yet) before trusting them as OPCD"
    )
