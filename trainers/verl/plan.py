"""Scale-out plans for the recipe families on a verl + Ray + vLLM cluster: commands to run, never run here.

`plan(...)` returns a `Plan`: ordered stages, each a shell command (`python -m verl.trainer.main_ppo` with Hydra
overrides, or verl's SFT / generation / evaluation entry points) written with explicit placeholders for
site-specific paths (<MODEL_ROOT>, <DATA_ROOT>, <CKPT_ROOT>, <RESULT_ROOT>, ...), plus a checklist of what must be
true before the first command: GPUs, Ray, vLLM, the Docker image, and the credentials the stages need. The commands
are written for verl 0.9.1 and pass its own config composition and start-up checks (tests/trainers/
test_verl_accepts.py). Upstream verl has GRPO and OPO advantage estimators; OPCD's (and OEL's consolidation's) is
rlloop's `trainers.verl.ext.opcd`, which verl imports itself (VERL_USE_EXTERNAL_MODULES); what is not expressible in
verl 0.9.1 (the teacher's context, GAD's discriminator training) is listed as unresolved rather than hidden.

Each family is one builder registered in `FAMILIES` (`trainers.verl.families` holds the built-ins); this module
validates the inputs, calls the family's builder and adds what every plan shares: the checklist, the roots (flags,
environment variables, or placeholders), the credentials each stage needs, the GPU setup path, and at the end what
is still unresolved. Every stage is labelled "not executed": planning starts no process, imports nothing from verl
and downloads nothing.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Literal, get_args

from pydantic import BaseModel, Field

from tasks.plugins import UnknownPluginError
from trainers.verl import families as _families  # noqa: F401 - its `@family` decorators register the built-ins
from trainers.verl import resolve
from trainers.verl.builders import (
    FAMILIES,
    MAIN_PPO,
    PROMPT_TYPES,
    TRACKS,
    VERL_VERSION,
    Checkpoints,
    FamilyBuilder,
    PlanContext,
    Prerequisite,
    Roles,
    Stage,
)
from trainers.verl.resolve import Credential, Root

__all__ = [
    "FAMILIES",
    "PLACEHOLDERS",
    "PROMPT_TYPES",
    "STAGES",
    "TRACKS",
    "Family",
    "Plan",
    "Prerequisite",
    "Stage",
    "family_names",
    "plan",
]

Family = Literal[
    "grpo", "opo", "opcd", "oel", "gad", "coach"
]  # the built-in families; plugins add more names

PLACEHOLDERS: dict[str, str] = {
    "<MODEL_ROOT>": "folder holding the base model checkpoints (HF format)",
    "<DATA_ROOT>": "folder holding train.parquet / valid.parquet in verl's RL format, and experience files",
    "<CKPT_ROOT>": "where checkpoints are written (shared storage visible to every node)",
    "<RESULT_ROOT>": "where generations, evaluation results and logs are written",
    "<VERL_EXT>": "trainers/verl/ext of the rlloop installed in <VERL_IMAGE> (verl reward-function files: "
    "benchmark_reward.py, zero_reward.py; coach_reward.py, oel_extract.py, gad_judge.py, coach_fuzzy.py, "
    "coach_score.py and text_game_agent_loop.yaml are NOT written yet)",
    "<VERL_IMAGE>": f"Docker image with verl {VERL_VERSION}, vLLM, Ray and rlloop (trainers.verl.ext) installed",
}

# placeholders only the newer stages and flags use: what resolves each
MORE_PLACEHOLDERS: dict[str, str] = {
    "<PROMPT_FILE>": "the system-prompt file to distil: pass --experience-path",
    "<PROMPT_TYPE>": f"which system prompt: pass --prompt-type ({', '.join(PROMPT_TYPES)})",
    "<STEP>": "the checkpoint step to evaluate: pass --checkpoint-step N (or a range A-B[:STEP])",
    "<COACH_MODEL>": "the coach model (GPT-4o or another OpenAI-compatible model): pass --coach",
    "<JUDGE_MODEL>": "the scoring model (GPT-4o or another OpenAI-compatible model): pass --coach",
}
_ALWAYS = {"<VERL_IMAGE>", "<VERL_EXT>"}


def family_names() -> list[str]:
    """Every family `plan` accepts: the built-ins in their order, then plugins, sorted."""
    builtins = list(get_args(Family))
    return builtins + [name for name in FAMILIES.names() if name not in builtins]


STAGES: dict[str, list[str]] = {
    name: list(FAMILIES.get(name).stages) for name in get_args(Family)
}  # built-ins

FAMILY_TRACKS: dict[str, list[str]] = {name: list(FAMILIES.get(name).tracks) for name in get_args(Family)}


class Plan(BaseModel):
    family: str  # a name in FAMILIES
    model: str
    nodes: int
    gpus_per_node: int
    stages: list[Stage]
    prerequisites: list[Prerequisite]
    placeholders: dict[str, str]
    notes: list[str] = Field(default_factory=list)
    track: str | None = None
    stage: str = "all"  # what was asked for: 'all' or the family's stage name (an alias resolved)
    gpu_class: str | None = None
    checkout: str | None = None
    roles: dict[str, str] = Field(default_factory=dict)  # policy and the roles the user named
    roots: dict[str, Root] = Field(default_factory=dict)  # placeholder -> the root that replaced it
    credentials: list[Credential] | None = None  # None: no --credentials given (nothing checked)
    unresolved: list[str] = Field(default_factory=list)  # what the user still has to say or prepare
    executed: bool = False  # a plan is never run by the planner

    def render(self) -> str:
        """Human-readable: checklist, then the numbered commands, then what is unresolved."""
        lines = [
            f"# {self.family} on {self.nodes} node(s) x {self.gpus_per_node} GPU(s), model {self.model}",
            "",
        ]
        lines.append("## Prerequisites")
        for p in self.prerequisites:
            lines.append(f"- [ ] {p.item}: {p.detail}" + (f"  (check: {p.check})" if p.check else ""))
        lines += ["", "## Placeholders"] + [f"- {k}: {v}" for k, v in self.placeholders.items()]
        if self.roots:
            lines += ["", "## Roots"] + [
                f"- {k} = {r.value}  (from {r.source})" for k, r in self.roots.items()
            ]
        lines += ["", "## Stages"]
        for number, stage in enumerate(self.stages, start=1):
            label = f"{stage.status}: " + (", ".join(stage.heavy) if stage.heavy else "CPU only")
            lines += [f"{number}. {stage.name} [{label}]: {stage.description}", ""]
            if stage.roles:
                lines += ["   roles: " + ", ".join(f"{k}={v}" for k, v in stage.roles.items()), ""]
            lines += [stage.command, ""]
        if self.notes:
            lines += ["## Notes"] + [f"- {n}" for n in self.notes]
        if self.credentials is not None:
            lines += ["", "## Credentials (variables checked for presence only; no value read)"]
            for c in self.credentials:
                state = ", ".join(f"{v} {'set' if ok else 'NOT set'}" for v, ok in c.variables.items())
                needed = f"needed by {', '.join(c.stages)}" if c.stages else "needed by no planned stage"
                declared = "declared" if c.declared else "NOT declared"
                lines.append(f"- {c.name} ({c.what}): {declared}; {needed}; {state}")
        lines += ["", "## Unresolved prerequisites"] + [f"- [ ] {u}" for u in self.unresolved]
        lines += [
            "",
            "Nothing above was executed: no stage, no check, no GPU, Docker, Ray, vLLM, W&B, Hugging Face, "
            "OpenAI, IF-Eval or checkpoint-merge step.",
        ]
        return "\n".join(lines)


def plan(
    family: str,
    stage: str = "all",
    model: str = "<MODEL_ROOT>/base",
    nodes: int = 1,
    gpus_per_node: int = 8,
    *,
    gpu_type: str | None = None,
    rollout_n: int = 8,
    train_batch_size: int = 256,
    max_prompt_length: int = 1024,
    max_response_length: int = 2048,
    tensor_parallel: int = 1,
    top_k: int = 256,
    rounds: int = 3,
    loggers: tuple[str, ...] = ("console", "wandb"),
    experiment: str | None = None,
    track: str | None = None,
    experience_path: str | None = None,
    prompt_type: str | None = None,
    reference: str | None = None,
    coach: str | None = None,
    reward_model: str | None = None,
    checkpoint_step: str | None = None,
    gpu_class: str | None = None,
    checkout: str | None = None,
    credentials: tuple[str, ...] | list[str] | None = None,
    roots: Mapping[str, str | None] | None = None,
    env: Mapping[str, str] | None = None,
) -> Plan:
    """The staged plan for `family` (all stages, or only `stage`: its name or an alias). Raises ValueError on
    impossible shapes and on a stage, track, prompt type, GPU class or credential the family does not know, with
    the valid ones. `roots` maps a root placeholder (<DATA_ROOT>, ...) to the user's value; `env` (default: this
    process's environment) is read only for which variables are set, never for a secret's value."""
    builder = _builder(family)
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("nodes and gpus_per_node must be at least 1")
    if gpus_per_node % tensor_parallel:
        raise ValueError(f"tensor_parallel ({tensor_parallel}) must divide gpus_per_node ({gpus_per_node})")
    chosen = "all" if stage == "all" else builder.resolve(stage)
    if chosen is None:
        raise ValueError(f"{family} has no stage {stage!r}; choose 'all' or one of {builder.choices()}")
    _check_track(builder, track, prompt_type)
    gpu = resolve.gpu_class(gpu_class)
    declared = None if credentials is None else resolve.credential_names(credentials)
    environment = os.environ if env is None else env
    ctx = PlanContext(
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type or (resolve.GPU_CLASSES[gpu] if gpu else "NVIDIA H100 80GB"),
        rollout_n=rollout_n,
        train_batch_size=train_batch_size,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
        tensor_parallel=tensor_parallel,
        top_k=top_k,
        rounds=rounds,
        loggers=tuple(loggers),
        experiment=experiment or f"rlloop-{family}",
        track=track,
        experience_path=experience_path,
        prompt_type=prompt_type,
        roles=Roles(
            reference=reference,
            coach=coach,
            reward=reward_model,
            checkpoint=Checkpoints.parse(checkpoint_step) if checkpoint_step else None,
        ),
    )
    built = builder.build(ctx)
    _check_batch(ctx, built.stages)
    roles = {"policy": model, **ctx.roles.given()}
    stages = [resolve.annotate(s, roles, ctx.loggers) for s in built.stages if chosen in ("all", s.name)]
    texts = [model, *(s.command for s in stages)]
    used = {p for p in PLACEHOLDERS if any(p in t for t in texts)} | _ALWAYS
    placeholders = {k: v for k, v in PLACEHOLDERS.items() if k in used}
    for name in resolve.placeholders_in(texts):
        placeholders.setdefault(name, MORE_PLACEHOLDERS.get(name, "given on the command line: replace it"))
    cluster = _cluster(ctx)
    if gpu:
        cluster.insert(4, resolve.setup_path(gpu))
    listed = None if declared is None else resolve.credentials(declared, stages, environment)
    result = Plan(
        family=family,
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        stages=stages,
        prerequisites=[*cluster, *_credentials(ctx), *built.prerequisites, _extensions()],
        placeholders=placeholders,
        notes=built.notes,
        track=track,
        stage=chosen,
        gpu_class=gpu,
        checkout=checkout,
        roles=roles,
        credentials=listed,
    )
    found = resolve.roots(roots or {}, environment)
    if found:
        data = resolve.substitute(result.model_dump(mode="json"), {k: r.value for k, r in found.items()})
        data["placeholders"] = {k: v for k, v in result.placeholders.items() if k not in found}
        data["roots"] = found
        result = Plan.model_validate(data)
    result.unresolved = _unresolved(result, builder, built.unresolved)
    return result


def _check_batch(ctx: PlanContext, stages: list[Stage]) -> None:
    """verl's `validate_config` refuses a rollout batch the GPUs cannot share evenly: say so before printing."""
    sequences = ctx.train_batch_size * ctx.rollout_n
    if any(MAIN_PPO in s.command for s in stages) and sequences % ctx.gpus:
        raise ValueError(
            f"verl needs train_batch_size x rollout_n ({ctx.train_batch_size} x {ctx.rollout_n} = {sequences}) "
            f"divisible by the GPU count ({ctx.nodes} x {ctx.gpus_per_node} = {ctx.gpus}); change "
            "--train-batch-size, --rollout-n or the cluster's shape"
        )


def _check_track(builder: FamilyBuilder, track: str | None, prompt_type: str | None) -> None:
    if track is not None and track not in builder.tracks:
        choices = (
            f"choose one of {', '.join(builder.tracks)}"
            if builder.tracks
            else f"it has none (the tracks {', '.join(TRACKS)} are OPCD's and OEL's)"
        )
        raise ValueError(f"{builder.name} has no track {track!r}; {choices}")
    if prompt_type is not None:
        if prompt_type not in PROMPT_TYPES:
            raise ValueError(f"unknown prompt type {prompt_type!r}; choose one of {', '.join(PROMPT_TYPES)}")
        if track != "system-prompt":
            raise ValueError("--prompt-type goes with --track system-prompt")


def _unresolved(result: Plan, builder: FamilyBuilder, family_items: list[str]) -> list[str]:
    """What the user still has to say or prepare before the first command, in the order they meet it."""
    items: list[str] = []
    if result.checkout is None:
        items.append("target checkout: pass --checkout (the checkout you control, where the commands run)")
    if result.gpu_class is None:
        items.append(
            f"GPU class: pass --gpu-class ({', '.join(resolve.GPU_CLASSES)}); it picks the setup path "
            "(B200 vs A100/H100/H200)"
        )
    items.append(
        "environment readiness: GPUs, Docker, Ray and vLLM per the prerequisites' checks (none was run here)"
    )
    if builder.tracks and result.track is None:
        items.append(
            f"track: pass --track ({', '.join(builder.tracks)}); without it the data is <DATA_ROOT>/*"
        )
    for name, text in result.placeholders.items():
        if name in ROOT_FLAGS:
            flag, variable = ROOT_FLAGS[name]
            items.append(f"{name}: pass {flag} or export {variable}")
        elif name not in _ALWAYS:
            items.append(f"{name}: {text}")
    items.append(
        "<VERL_EXT>: the path of trainers/verl/ext in <VERL_IMAGE>; a stage that names a file not written yet "
        "(see Placeholders) needs it written first"
    )
    items.append(
        "<VERL_IMAGE>: build or pull the image with verl, vLLM, Ray and the extensions on every node"
    )
    items += family_items
    items += resolve.credential_gaps(result.credentials, result.stages)
    return items


ROOT_FLAGS = resolve.ROOTS


def _builder(family: str) -> FamilyBuilder:
    try:
        return FAMILIES.get(family)
    except UnknownPluginError:
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(family_names())}") from None


def _cluster(ctx: PlanContext) -> list[Prerequisite]:
    """GPUs, Ray, vLLM, the image and shared storage: what every plan needs before its first command."""
    total = ctx.nodes * ctx.gpus_per_node
    return [
        Prerequisite(
            item="GPUs",
            detail=f"{ctx.nodes} node(s) x {ctx.gpus_per_node} x {ctx.gpu_type} ({total} in all)",
            check="nvidia-smi --query-gpu=name,memory.total --format=csv",
        ),
        Prerequisite(
            item="Ray",
            detail=f"a Ray cluster spanning the {ctx.nodes} node(s) that reports {total} GPUs",
            check="ray status",
        ),
        Prerequisite(
            item="vLLM",
            detail=f"verl {VERL_VERSION} (what the commands are written for) and the vLLM it supports, in the image",
            check="python -c 'import vllm, verl; print(vllm.__version__, verl.__version__)'",
        ),
        Prerequisite(
            item="Docker image",
            detail="<VERL_IMAGE> pulled on every node",
            check="docker image inspect <VERL_IMAGE>",
        ),
        Prerequisite(
            item="Storage", detail="<MODEL_ROOT>, <DATA_ROOT>, <CKPT_ROOT>, <RESULT_ROOT> on shared storage"
        ),
    ]


def _credentials(ctx: PlanContext) -> list[Prerequisite]:
    """The secrets the loggers and the model's source need (named, never read)."""
    needed = []
    if "wandb" in ctx.loggers:
        needed.append(
            Prerequisite(item="W&B", detail="WANDB_API_KEY exported on every node (trainer.logger has wandb)")
        )
    if not ctx.model.startswith(("<", "/", ".")):
        needed.append(
            Prerequisite(
                item="Hugging Face",
                detail=f"HF_TOKEN with access to {ctx.model}, or pre-download it into <MODEL_ROOT>",
            )
        )
    return needed


def _extensions() -> Prerequisite:
    """Every family scores with rlloop's benchmark scorer or a custom loss, which upstream verl does not have."""
    return Prerequisite(
        item="verl extensions",
        detail="rlloop installed in <VERL_IMAGE> (verl imports trainers.verl.ext.opcd in every worker through "
        "the VERL_USE_EXTERNAL_MODULES the plan passes in ray_kwargs); <VERL_EXT> is its trainers/verl/ext folder",
        check="python -c 'import trainers.verl.ext.opcd'",
    )
