"""The built-in families' builders, one function each: the stages a family runs, in order, as verl commands.

Each takes the validated `PlanContext` and returns a `FamilyPlan`; what every plan shares (validation, the cluster
checklist, credentials, placeholders) is added by `trainers.verl_plan.plan`, and the override blocks several
families use live in `trainers.verl_builders`.
"""

from __future__ import annotations

from trainers.verl_builders import (
    BENCHMARK_REWARD,
    EVALUATION,
    GENERATION,
    MAIN_PPO,
    SFT,
    FamilyPlan,
    PlanContext,
    Prerequisite,
    Stage,
    check_inputs_stage,
    command,
    distill_note,
    distill_stage,
    exact_on_policy,
    family,
    verl_stage,
)


@family("grpo", "train")
def grpo(ctx: PlanContext) -> FamilyPlan:
    overrides = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(),
        BENCHMARK_REWARD,
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={max(1, ctx.train_batch_size // 4)}",
    ]
    return FamilyPlan(
        [verl_stage("train", "GRPO: group-normalised advantages, clipped PPO objective", MAIN_PPO, overrides)]
    )


@family("opo", "train")
def opo(ctx: PlanContext) -> FamilyPlan:
    overrides = [
        "algorithm.adv_estimator=opo",
        *ctx.common(),
        BENCHMARK_REWARD,
        *exact_on_policy(ctx.train_batch_size),
    ]
    description = "OPO: length-weighted optimal baseline, exactly on-policy (one step per rollout batch)"
    return FamilyPlan([verl_stage("train", description, MAIN_PPO, overrides)])


@family("opcd", "check_inputs", "distill")
def opcd(ctx: PlanContext) -> FamilyPlan:
    description = (
        "on-policy context distillation: student without context, teacher = frozen start model with it"
    )
    distill = distill_stage(ctx, "distill", description, "<DATA_ROOT>/experience.json")
    return FamilyPlan([check_inputs_stage(), distill], notes=[distill_note(ctx.top_k)])


@family("oel", "rollout", "extract", "consolidate", "evaluate")
def oel(ctx: PlanContext) -> FamilyPlan:
    rounds = f"<CKPT_ROOT>/{ctx.experiment}/round_<r>"
    rollout = [
        *ctx.generation(
            "<DATA_ROOT>/train.parquet", "<RESULT_ROOT>/oel/round_<r>/episodes.parquet", ctx.model
        ),
        f"rollout.n={ctx.rollout_n}",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
        f"rollout.response_length={ctx.max_response_length}",
    ]
    extract = Stage(
        name="extract",
        description="extract experience items from the episodes with the extractor prompt, merge into the list",
        command="python <VERL_EXT>/oel_extract.py --episodes <RESULT_ROOT>/oel/round_<r>/episodes.parquet "
        "--experience <DATA_ROOT>/experience.json",
    )
    consolidate = distill_stage(
        ctx,
        "consolidate",
        "OPCD of the experience list into the weights (deploy states without experience)",
        "<DATA_ROOT>/experience.json",
        checkpoint_dir=rounds,
    )
    generations = "<RESULT_ROOT>/oel/round_<r>/eval_generations.parquet"
    eval_generation = [
        *ctx.generation("<DATA_ROOT>/valid.parquet", generations, rounds),
        "rollout.n=1",
        "rollout.temperature=0",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
    ]
    eval_score = [f"data.path={generations}", BENCHMARK_REWARD]
    evaluate = Stage(
        name="evaluate",
        description="greedy generations on the valid split from the consolidated policy, then score them",
        command=command(GENERATION, eval_generation) + " && " + command(EVALUATION, eval_score),
        overrides=eval_generation + eval_score,
    )
    first = (
        f"play episodes with the current policy; repeat stages 1-4 for r=1..{ctx.rounds}, and from round 2 on "
        f"set model.path=<CKPT_ROOT>/{ctx.experiment}/round_<r-1>"
    )
    notes = [
        distill_note(ctx.top_k),
        "Multi-turn games (FrozenLake, Sokoban) need verl's multi-turn rollout and an env tool config.",
    ]
    return FamilyPlan(
        [verl_stage("rollout", first, GENERATION, rollout), extract, consolidate, evaluate], notes=notes
    )


@family("gad", "sft_warmup", "adversarial")
def gad(ctx: PlanContext) -> FamilyPlan:
    warm = f"<CKPT_ROOT>/{ctx.experiment}/sft"
    sft = [
        "data.train_files=<DATA_ROOT>/teacher_sft.parquet",
        "data.val_files=<DATA_ROOT>/teacher_sft_valid.parquet",
        "data.prompt_key=prompt",
        "data.response_key=teacher_response",
        f"model.partial_pretrain={ctx.model}",
        f"trainer.default_local_dir={warm}",
        f"trainer.n_gpus_per_node={ctx.gpus_per_node}",
        f"trainer.nnodes={ctx.nodes}",
        "trainer.project_name=rlloop",
        f"trainer.experiment_name={ctx.experiment}-sft",
    ]
    torchrun = f"torchrun --nnodes={ctx.nodes} --nproc_per_node={ctx.gpus_per_node} -m"
    adversarial = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(model=warm),
        *exact_on_policy(ctx.train_batch_size),
        "reward_model.enable=True",
        f"reward_model.model.path={ctx.model}",
        "+rlloop.gad.discriminator_loss=bradley_terry",
        "+rlloop.gad.teacher_responses=<DATA_ROOT>/teacher_sft.parquet",
    ]
    student = "student: group-normalised PG on the discriminator's score; discriminator: Bradley-Terry"
    return FamilyPlan(
        [
            verl_stage("sft_warmup", "SFT on the teacher's responses", SFT, sft, launcher=torchrun),
            verl_stage("adversarial", student, MAIN_PPO, adversarial),
        ]
    )


@family("coach", "check_inputs", "coach_experience", "distill", "rl_baseline")
def coach(ctx: PlanContext) -> FamilyPlan:
    experience = Stage(
        name="coach_experience",
        description="the coach scores sampled responses against the rubric and writes the experience list",
        command="python -m trainers coach --config <RESULT_ROOT>/coach_experience.json  # mode=distill, max_steps=0",
    )
    distill = distill_stage(
        ctx, "distill", "OPCD of the coach's experience (the paper's method)", "<RESULT_ROOT>/experience.json"
    )
    rl_baseline = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(),
        *exact_on_policy(ctx.train_batch_size),
        "custom_reward_function.path=<VERL_EXT>/coach_reward.py",
    ]
    openai = Prerequisite(
        item="OpenAI-compatible coach",
        detail="OPENAI_BASE_URL and OPENAI_API_KEY reachable from the driver node",
    )
    return FamilyPlan(
        [
            check_inputs_stage(),
            experience,
            distill,
            verl_stage(
                "rl_baseline", "GRPO on the coach's rubric score (the RL baseline)", MAIN_PPO, rl_baseline
            ),
        ],
        prerequisites=[openai],
        notes=[distill_note(ctx.top_k)],
    )
