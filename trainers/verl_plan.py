"""Scale-out plans for the recipe families on a verl + Ray + vLLM cluster: commands to run, never run here.

`plan(...)` returns a `Plan`: ordered stages, each a shell command (`python -m verl.trainer.main_ppo` with Hydra
overrides, or verl's SFT / generation / evaluation entry points) written with explicit placeholders for
site-specific paths (<MODEL_ROOT>, <DATA_ROOT>, <CKPT_ROOT>, <RESULT_ROOT>, ...), plus a checklist of what must be
true before the first command: GPUs, Ray, vLLM, the Docker image, and the credentials the stages need. Upstream
verl has GRPO and OPO advantage estimators; the distillation families (OPCD, OEL consolidation, GAD's discriminator
reward, the coach's reward) need extension modules, which are named as prerequisites rather than hidden.
"""

from __future__ import annotations

import shlex
from typing import Literal, get_args

from pydantic import BaseModel, Field

Family = Literal["grpo", "opo", "opcd", "oel", "gad", "coach"]

PLACEHOLDERS: dict[str, str] = {
    "<MODEL_ROOT>": "folder holding the base model checkpoints (HF format)",
    "<DATA_ROOT>": "folder holding train.parquet / valid.parquet in verl's RL format, and experience files",
    "<CKPT_ROOT>": "where checkpoints are written (shared storage visible to every node)",
    "<RESULT_ROOT>": "where generations, evaluation results and logs are written",
    "<VERL_EXT>": "rlloop's verl extension modules (OPCD top-k reverse-KL loss with a context-reading reference, "
    "benchmark / coach reward functions, OEL extractor); NOT written yet: the plan names where they plug in",
    "<VERL_IMAGE>": "Docker image with verl, vLLM, Ray and rlloop's extension modules installed",
}

_BENCHMARK_REWARD = (
    "custom_reward_function.path=<VERL_EXT>/benchmark_reward.py"  # rlloop's scorer as a verl reward
)

STAGES: dict[str, list[str]] = {
    "grpo": ["train"],
    "opo": ["train"],
    "opcd": ["check_inputs", "distill"],
    "oel": ["rollout", "extract", "consolidate", "evaluate"],
    "gad": ["sft_warmup", "adversarial"],
    "coach": ["check_inputs", "coach_experience", "distill", "rl_baseline"],
}


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


class Plan(BaseModel):
    family: Family
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


def _command(module: str, overrides: list[str], *, launcher: str = "python -m") -> str:
    return " \\\n    ".join(
        [f"{launcher} {module}", *(shlex.quote(o) if set(o) & set(" []*?") else o for o in overrides)]
    )


def _common_rl(
    model: str,
    nodes: int,
    gpus: int,
    tp: int,
    rollout_n: int,
    batch: int,
    prompt_len: int,
    response_len: int,
    experiment: str,
    loggers: list[str],
) -> list[str]:
    return [
        "data.train_files=<DATA_ROOT>/train.parquet",
        "data.val_files=<DATA_ROOT>/valid.parquet",
        f"data.train_batch_size={batch}",
        f"data.max_prompt_length={prompt_len}",
        f"data.max_response_length={response_len}",
        f"actor_rollout_ref.model.path={model}",
        "actor_rollout_ref.rollout.name=vllm",
        f"actor_rollout_ref.rollout.n={rollout_n}",
        f"actor_rollout_ref.rollout.tensor_model_parallel_size={tp}",
        "actor_rollout_ref.rollout.gpu_memory_utilization=0.6",
        "actor_rollout_ref.actor.strategy=fsdp",
        f"trainer.nnodes={nodes}",
        f"trainer.n_gpus_per_node={gpus}",
        f"trainer.logger=[{','.join(loggers)}]",
        "trainer.project_name=rlloop",
        f"trainer.experiment_name={experiment}",
        f"trainer.default_local_dir=<CKPT_ROOT>/{experiment}",
    ]


def _exact_on_policy(batch: int) -> list[str]:
    """One optimiser step per rollout batch: mini-batch = batch, one epoch, no KL or entropy terms."""
    return [
        f"actor_rollout_ref.actor.ppo_mini_batch_size={batch}",
        "actor_rollout_ref.actor.ppo_epochs=1",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "actor_rollout_ref.actor.entropy_coeff=0",
        "algorithm.use_kl_in_reward=False",
    ]


def _distill_overrides(context_file: str, top_k: int) -> list[str]:
    return [
        "+rlloop.distill.mode=opcd",
        f"+rlloop.distill.context_file={context_file}",
        f"+rlloop.distill.top_k={top_k}",
        "+rlloop.distill.teacher=ref",
        "actor_rollout_ref.actor.use_kl_loss=False",
        "custom_reward_function.path=<VERL_EXT>/opcd.py",
    ]


def plan(
    family: Family,
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
    if family not in get_args(Family):
        raise ValueError(f"unknown family {family!r}; choose one of {', '.join(get_args(Family))}")
    if nodes < 1 or gpus_per_node < 1:
        raise ValueError("nodes and gpus_per_node must be at least 1")
    if gpus_per_node % tensor_parallel:
        raise ValueError(f"tensor_parallel ({tensor_parallel}) must divide gpus_per_node ({gpus_per_node})")
    valid = STAGES[family]
    if stage != "all" and stage not in valid:
        raise ValueError(f"{family} has no stage {stage!r}; choose 'all' or one of {', '.join(valid)}")
    name = experiment or f"rlloop-{family}"
    common = _common_rl(
        model,
        nodes,
        gpus_per_node,
        tensor_parallel,
        rollout_n,
        train_batch_size,
        max_prompt_length,
        max_response_length,
        name,
        list(loggers),
    )
    main_ppo = "verl.trainer.main_ppo"
    stages: list[Stage] = []

    def add(
        stage_name: str, description: str, module: str, overrides: list[str], launcher: str = "python -m"
    ) -> None:
        stages.append(
            Stage(
                name=stage_name,
                description=description,
                command=_command(module, overrides, launcher=launcher),
                overrides=overrides,
            )
        )

    check = Stage(
        name="check_inputs",
        description="validate the experience list / system prompt and the data root, without loading a model",
        command="rlloop check-inputs --experience <DATA_ROOT>/experience.json --data-root <DATA_ROOT>",
    )
    if family == "grpo":
        add(
            "train",
            "GRPO: group-normalised advantages, clipped PPO objective",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *common,
                _BENCHMARK_REWARD,
                "actor_rollout_ref.actor.use_kl_loss=True",
                "actor_rollout_ref.actor.kl_loss_coef=0.001",
                f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, train_batch_size // 4)}",
            ],
        )
    elif family == "opo":
        add(
            "train",
            "OPO: length-weighted optimal baseline, exactly on-policy (one step per rollout batch)",
            main_ppo,
            ["algorithm.adv_estimator=opo", *common, _BENCHMARK_REWARD, *_exact_on_policy(train_batch_size)],
        )
    elif family == "opcd":
        stages.append(check)
        add(
            "distill",
            "on-policy context distillation: student without context, teacher = frozen start model with it",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *common,
                *_exact_on_policy(train_batch_size)[:2],
                *_distill_overrides("<DATA_ROOT>/experience.json", top_k),
            ],
        )
    elif family == "oel":
        add(
            "rollout",
            f"play episodes with the current policy; repeat stages 1-4 for r=1..{rounds}, and from round 2 on "
            f"set model.path=<CKPT_ROOT>/{name}/round_<r-1>",
            "verl.trainer.main_generation",
            [
                f"trainer.nnodes={nodes}",
                f"trainer.n_gpus_per_node={gpus_per_node}",
                "data.path=<DATA_ROOT>/train.parquet",
                "data.output_path=<RESULT_ROOT>/oel/round_<r>/episodes.parquet",
                f"model.path={model}",
                f"rollout.n={rollout_n}",
                f"rollout.tensor_model_parallel_size={tensor_parallel}",
                f"rollout.response_length={max_response_length}",
            ],
        )
        stages.append(
            Stage(
                name="extract",
                description="extract experience items from the episodes with the extractor prompt, merge into the list",
                command="python <VERL_EXT>/oel_extract.py --episodes <RESULT_ROOT>/oel/round_<r>/episodes.parquet "
                "--experience <DATA_ROOT>/experience.json",
            )
        )
        add(
            "consolidate",
            "OPCD of the experience list into the weights (deploy states without experience)",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *(o for o in common if not o.startswith("trainer.default_local_dir=")),
                *_exact_on_policy(train_batch_size)[:2],
                *_distill_overrides("<DATA_ROOT>/experience.json", top_k),
                f"trainer.default_local_dir=<CKPT_ROOT>/{name}/round_<r>",
            ],
        )
        eval_generation = [
            f"trainer.nnodes={nodes}",
            f"trainer.n_gpus_per_node={gpus_per_node}",
            "data.path=<DATA_ROOT>/valid.parquet",
            "data.output_path=<RESULT_ROOT>/oel/round_<r>/eval_generations.parquet",
            f"model.path=<CKPT_ROOT>/{name}/round_<r>",
            "rollout.n=1",
            "rollout.temperature=0",
            f"rollout.tensor_model_parallel_size={tensor_parallel}",
        ]
        eval_score = ["data.path=<RESULT_ROOT>/oel/round_<r>/eval_generations.parquet", _BENCHMARK_REWARD]
        stages.append(
            Stage(
                name="evaluate",
                description="greedy generations on the valid split from the consolidated policy, then score them",
                command=_command("verl.trainer.main_generation", eval_generation)
                + " && \
"
                + _command("verl.trainer.main_eval", eval_score),
                overrides=eval_generation + eval_score,
            )
        )
    elif family == "gad":
        add(
            "sft_warmup",
            "SFT on the teacher's responses",
            "verl.trainer.fsdp_sft_trainer",
            [
                "data.train_files=<DATA_ROOT>/teacher_sft.parquet",
                "data.val_files=<DATA_ROOT>/teacher_sft_valid.parquet",
                "data.prompt_key=prompt",
                "data.response_key=teacher_response",
                f"model.partial_pretrain={model}",
                f"trainer.default_local_dir=<CKPT_ROOT>/{name}/sft",
                f"trainer.n_gpus_per_node={gpus_per_node}",
                f"trainer.nnodes={nodes}",
                "trainer.project_name=rlloop",
                f"trainer.experiment_name={name}-sft",
            ],
            launcher=f"torchrun --nnodes={nodes} --nproc_per_node={gpus_per_node} -m",
        )
        add(
            "adversarial",
            "student: group-normalised PG on the discriminator's score; discriminator: Bradley-Terry",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *[o.replace(f"model.path={model}", f"model.path=<CKPT_ROOT>/{name}/sft") for o in common],
                *_exact_on_policy(train_batch_size),
                "reward_model.enable=True",
                f"reward_model.model.path={model}",
                "+rlloop.gad.discriminator_loss=bradley_terry",
                "+rlloop.gad.teacher_responses=<DATA_ROOT>/teacher_sft.parquet",
            ],
        )
    else:  # coach
        stages.append(check)
        stages.append(
            Stage(
                name="coach_experience",
                description="the coach scores sampled responses against the rubric and writes the experience list",
                command="python -m trainers coach --config <RESULT_ROOT>/coach_experience.json  # mode=distill, max_steps=0",
            )
        )
        add(
            "distill",
            "OPCD of the coach's experience (the paper's method)",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *common,
                *_exact_on_policy(train_batch_size)[:2],
                *_distill_overrides("<RESULT_ROOT>/experience.json", top_k),
            ],
        )
        add(
            "rl_baseline",
            "GRPO on the coach's rubric score (the RL baseline)",
            main_ppo,
            [
                "algorithm.adv_estimator=grpo",
                *common,
                *_exact_on_policy(train_batch_size),
                "custom_reward_function.path=<VERL_EXT>/coach_reward.py",
            ],
        )
    if stage != "all":
        stages = [s for s in stages if s.name == stage]

    total = nodes * gpus_per_node
    prerequisites = [
        Prerequisite(
            item="GPUs",
            detail=f"{nodes} node(s) x {gpus_per_node} x {gpu_type} ({total} in all)",
            check="nvidia-smi --query-gpu=name,memory.total --format=csv",
        ),
        Prerequisite(
            item="Ray",
            detail=f"a Ray cluster spanning the {nodes} node(s) that reports {total} GPUs",
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
    if "wandb" in loggers:
        prerequisites.append(
            Prerequisite(item="W&B", detail="WANDB_API_KEY exported on every node (trainer.logger has wandb)")
        )
    if not model.startswith(("<", "/", ".")):
        prerequisites.append(
            Prerequisite(
                item="Hugging Face",
                detail=f"HF_TOKEN with access to {model}, or pre-download it into <MODEL_ROOT>",
            )
        )
    if family == "coach":
        prerequisites.append(
            Prerequisite(
                item="OpenAI-compatible coach",
                detail="OPENAI_BASE_URL and OPENAI_API_KEY reachable from the driver node",
            )
        )
    if family:  # every family scores with rlloop's benchmark scorer or a custom loss
        prerequisites.append(
            Prerequisite(
                item="verl extensions",
                detail="<VERL_EXT> modules written and installed in <VERL_IMAGE> (not in upstream verl, not in rlloop yet)",
            )
        )
    notes = []
    if family in {"opcd", "oel", "coach"}:
        notes.append(
            f"The distillation loss is top-k reverse KL (k={top_k}) against the frozen reference given the context."
        )
    if family == "oel":
        notes.append(
            "Multi-turn games (FrozenLake, Sokoban) need verl's multi-turn rollout and an env tool config."
        )
    used = {p for p in PLACEHOLDERS if any(p in s.command for s in stages) or p in model}
    used.update({"<VERL_IMAGE>", "<VERL_EXT>"})
    return Plan(
        family=family,
        model=model,
        nodes=nodes,
        gpus_per_node=gpus_per_node,
        stages=stages,
        prerequisites=prerequisites,
        placeholders={k: v for k, v in PLACEHOLDERS.items() if k in used},
        notes=notes,
    )
