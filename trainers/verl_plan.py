"""Scale-out plans for the recipe families on a verl + Ray + vLLM cluster: commands to run, never run here.

`plan(...)` returns a `Plan`: ordered stages, each a shell command (`python -m verl.trainer.main_ppo` with Hydra
overrides, or verl's SFT / generation / evaluation entry points) written with explicit placeholders for
site-specific paths (<MODEL_ROOT>, <DATA_ROOT>, <CKPT_ROOT>, <RESULT_ROOT>, ...), plus a checklist of what must be
true before the first command: GPUs, Ray, vLLM, the Docker image, and the credentials the stages need. Upstream
verl has GRPO and OPO advantage estimators; the distillation families (OPCD, OEL consolidation, GAD's discriminator
reward, the coach's reward) need extension modules, which are named as prerequisites rather than hidden.

Each family is one builder registered in `FAMILIES` (`trainers.verl_families` holds the built-ins); this module
validates the inputs, calls the family's builder and adds what every plan shares.
"""

from __future__ import annotations

from typing import Literal, get_args

from pydantic import BaseModel, Field

from tasks.plugins import UnknownPluginError
from trainers.verl_builders import FAMILIES, FamilyBuilder, PlanContext, Prerequisite, Stage

__all__ = [
    "FAMILIES",
    "PLACEHOLDERS",
    "STAGES",
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
    "<VERL_EXT>": "rlloop's verl extension modules (OPCD top-k reverse-KL loss with a context-reading reference, "
    "benchmark / coach reward functions, OEL extractor); NOT written yet: the plan names where they plug in",
    "<VERL_IMAGE>": "Docker image with verl, vLLM, Ray and rlloop's extension modules installed",
}


def family_names() -> list[str]:
    """Every family `plan` accepts: the built-ins in their order, then plugins, sorted."""
    builtins = list(get_args(Family))
    return builtins + [name for name in FAMILIES.names() if name not in builtins]


STAGES: dict[str, list[str]] = {
    name: list(FAMILIES.get(name).stages) for name in get_args(Family)
}  # built-ins


class Plan(BaseModel):
    family: str  # a name in FAMILIES
    model: str
    nodes: int
    gpus_per_node: int
    stages: list[Stage]
    prerequisites: list[Prerequisite]
    placeholders: dict[str, str]
    notes: list[str] = Field(default_factory=list)

    def render(self) -> str:
        """Human-readable: checklist, then the numbered commands."""
        lines = [
            f"# {self.family} on {self.nodes} node(s) x {self.gpus_per_node} GPU(s), model {self.model}",
            "",
        ]
        lines.append("## Prerequisites")
        for p in self.prerequisites:
            lines.append(f"- [ ] {p.item}: {p.detail}" + (f"  (check: {p.check})" if p.check else ""))
        lines += ["", "## Placeholders"] + [f"- {k}: {v}" for k, v in self.placeholders.items()]
        lines += ["", "## Stages"]
        for number, stage in enumerate(self.stages, start=1):
            lines += [f"{number}. {stage.name}: {stage.description}", "", stage.command, ""]
        if self.notes:
            lines += ["## Notes"] + [f"- {n}" for n in self.notes]
        return "\n".join(lines)


def plan(
    family: str,
    stage: str = "all",
    model: str = "<MODEL_ROOT>/base",
    nodes: int = 1,
    gpus_per_node: int = 8,
    *,
    gpu_type: str = "NVIDIA H100 80GB",
    rollout_n: int = 8,
    train_batch_size: int = 256,
    max_prompt_length: int = 1024,
    max_response_length: int = 2048,
    tensor_parallel: int = 1,
    top_k: int = 256,
    rounds: int = 3,
    loggers: tuple[str, ...] = ("console", "wandb"),
    experiment: str | None = None,
) -> Plan:
    """The staged plan for `family` (all stages, or only `stage`). Raises ValueError on impossible shapes."""
    builder = _builder(family)
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("nodes and gpus_per_node must be at least 1")
    if gpus_per_node % tensor_parallel:
        raise ValueError(f"tensor_parallel ({tensor_parallel}) must divide gpus_per_node ({gpus_per_node})")
    if stage != "all" and stage not in builder.stages:
        raise ValueError(
            f"{family} has no stage {stage!r}; choose 'all' or one of {', '.join(builder.stages)}"
        )
    ctx = PlanContext(
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        gpu_type=gpu_type,
        rollout_n=rollout_n,
        train_batch_size=train_batch_size,
        max_prompt_length=max_prompt_length,
        max_response_length=max_response_length,
        tensor_parallel=tensor_parallel,
        top_k=top_k,
        rounds=rounds,
        loggers=tuple(loggers),
        experiment=experiment or f"rlloop-{family}",
    )
    built = builder.build(ctx)
    stages = [s for s in built.stages if stage in ("all", s.name)]
    used = {p for p in PLACEHOLDERS if any(p in s.command for s in stages) or p in model}
    used.update({"<VERL_IMAGE>", "<VERL_EXT>"})
    return Plan(
        family=family,
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        stages=stages,
        prerequisites=[*_cluster(ctx), *_credentials(ctx), *built.prerequisites, _extensions()],
        placeholders={k: v for k, v in PLACEHOLDERS.items() if k in used},
        notes=built.notes,
    )


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
            detail="vLLM importable in the image, matching verl's supported version",
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
        detail="<VERL_EXT> modules written and installed in <VERL_IMAGE> (not in upstream verl, not in rlloop yet)",
    )
