"""The built-in families' builders, one function each: the stages a family runs, in order, as verl commands.

Stage names are the ones the LMOps families use (OPCD's on-policy / off-policy, OEL's extraction ... evaluation,
the coach's train ... score, GAD's SeqKD ... eval, OPO's config); rlloop's earlier names stay as aliases. Each
builder takes the validated `PlanContext` and returns a `FamilyPlan`; what every plan shares (validation, the
cluster checklist, credentials, placeholders, roots, what is unresolved) is added by `trainers.verl_plan.plan`, and
the override blocks several families use live in `trainers.verl_builders`.
"""

from __future__ import annotations

from trainers.verl_builders import (
    BENCHMARK_REWARD,
    EVALUATION,
    GENERATION,
    MAIN_PPO,
    SFT,
    TRACKS,
    FamilyPlan,
    PlanContext,
    Prerequisite,
    Stage,
    chained,
    check_inputs_stage,
    checkpoint,
    command,
    distill_note,
    distill_stage,
    exact_on_policy,
    family,
    loop,
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


@family("opo", "config", aliases={"train": "config"})
def opo(ctx: PlanContext) -> FamilyPlan:
    overrides = [
        "algorithm.adv_estimator=opo",
        *ctx.common(),
        BENCHMARK_REWARD,
        *exact_on_policy(ctx.train_batch_size),
    ]
    description = "OPO: length-weighted optimal baseline, exactly on-policy (one step per rollout batch)"
    return FamilyPlan([verl_stage("config", description, MAIN_PPO, overrides)])


@family(
    "opcd",
    "check-inputs",
    "on-policy",
    "off-policy",
    aliases={"check_inputs": "check-inputs", "distill": "on-policy"},
    tracks=TRACKS,
)
def opcd(ctx: PlanContext) -> FamilyPlan:
    description = (
        "on-policy context distillation: student without context, teacher = frozen start model with it"
    )
    context = ctx.context_file()
    on_policy = distill_stage(ctx, "on-policy", description, context)
    return FamilyPlan(
        [check_inputs_stage(ctx), on_policy, off_policy(ctx, context)], notes=[distill_note(ctx.top_k)]
    )


def off_policy(ctx: PlanContext, context: str) -> Stage:
    """The off-policy baseline: the teacher, context in its prompt, writes trajectories and top-k logits; the
    student is then trained on them without the context."""
    saved = f"<RESULT_ROOT>/{ctx.experiment}/off_policy_data/trajectories.parquet"
    teacher = ctx.roles.reference or ctx.model
    generate = [
        *ctx.generation(ctx.data_file("train.parquet"), saved, teacher),
        "data.n_samples=1",
        f"rollout.response_length={ctx.max_response_length}",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
        f"+rlloop.distill.context_file={context}",
        f"+rlloop.distill.save_top_k_logits={ctx.top_k}",
    ]
    out = f"<CKPT_ROOT>/{ctx.experiment}/off_policy"
    train = [
        *ctx.sft(saved, saved, "responses", ctx.model, out, f"{ctx.experiment}-offp"),
        f"+rlloop.distill.teacher_logits={saved}",
        f"+rlloop.distill.top_k={ctx.top_k}",
    ]
    return chained(
        "off-policy",
        "off-policy context distillation (baseline): teacher trajectories and logits with the context, then the "
        "student trained on them without it",
        [(command(GENERATION, generate), generate), (command(SFT, train, launcher=ctx.torchrun()), train)],
    )


@family(
    "oel",
    "deploy",
    "extraction",
    "consolidation",
    "evaluation",
    aliases={
        "rollout": "deploy",
        "extract": "extraction",
        "consolidate": "consolidation",
        "evaluate": "evaluation",
    },
    tracks=("text-game",),
)
def oel(ctx: PlanContext) -> FamilyPlan:
    rounds = f"<CKPT_ROOT>/{ctx.experiment}/round_<r>"
    rollout = [
        *ctx.generation(
            ctx.data_file("train.parquet"), "<RESULT_ROOT>/oel/round_<r>/episodes.parquet", ctx.model
        ),
        f"rollout.n={ctx.rollout_n}",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
        f"rollout.response_length={ctx.max_response_length}",
    ]
    experience = ctx.context_file()
    extractor = f" --extractor-model {ctx.roles.coach}" if ctx.roles.coach else ""
    extract = Stage(
        name="extraction",
        description="extract experience items from the episodes with the extractor prompt, merge into the list",
        command="python <VERL_EXT>/oel_extract.py --episodes <RESULT_ROOT>/oel/round_<r>/episodes.parquet "
        f"--experience {experience}{extractor}",
    )
    consolidate = distill_stage(
        ctx,
        "consolidation",
        "OPCD of the experience list into the weights (deploy states without experience)",
        experience,
        checkpoint_dir=rounds,
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
        [verl_stage("deploy", first, GENERATION, rollout), extract, consolidate, oel_evaluation(ctx, rounds)],
        notes=notes,
    )


def oel_evaluation(ctx: PlanContext, rounds: str) -> Stage:
    """Greedy generations on the valid split, scored; with --checkpoint-step, from that merged checkpoint of the
    round, followed by IF-Eval on it."""
    generations = "<RESULT_ROOT>/oel/round_<r>/eval_generations.parquet"
    model = rounds
    parts: list[tuple[str, list[str]]] = []
    if ctx.roles.checkpoint:
        merging, model = checkpoint(ctx, rounds)
        parts.append((merging, []))
    eval_generation = [
        *ctx.generation(ctx.data_file("valid.parquet"), generations, model),
        "rollout.n=1",
        "rollout.temperature=0",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
    ]
    eval_score = [f"data.path={generations}", BENCHMARK_REWARD]
    parts += [
        (command(GENERATION, eval_generation), eval_generation),
        (command(EVALUATION, eval_score), eval_score),
    ]
    description = "greedy generations on the valid split from the consolidated policy, then score them"
    if ctx.roles.checkpoint:
        parts.append((if_eval(model, "<RESULT_ROOT>/oel/round_<r>/ifeval"), []))
        description += "; then IF-Eval on the merged checkpoint"
    stage = chained("evaluation", description, parts)
    if ctx.roles.checkpoint:
        stage.command = loop(ctx, stage.command)
    return stage


def if_eval(model: str, output: str) -> str:
    """IF-Eval with lm-evaluation-harness on vLLM (it fetches the IF-Eval data from the Hugging Face hub)."""
    return (
        f"lm_eval --model vllm --model_args pretrained={model} --tasks ifeval --batch_size auto "
        f"--apply_chat_template --output_path {output}"
    )


@family("gad", "seqkd", "warmup", "adversarial", "generation", "eval", aliases={"sft_warmup": "warmup"})
def gad(ctx: PlanContext) -> FamilyPlan:
    warm = f"<CKPT_ROOT>/{ctx.experiment}/sft"
    teacher_data = ("<DATA_ROOT>/teacher_sft.parquet", "<DATA_ROOT>/teacher_sft_valid.parquet")
    seqkd = ctx.sft(
        *teacher_data,
        "teacher_response",
        ctx.model,
        f"<CKPT_ROOT>/{ctx.experiment}/seqkd",
        f"{ctx.experiment}-seqkd",
    )
    sft = ctx.sft(*teacher_data, "teacher_response", ctx.model, warm, f"{ctx.experiment}-sft")
    adversarial = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(model=warm),
        *exact_on_policy(ctx.train_batch_size),
        "reward_model.enable=True",
        f"reward_model.model.path={ctx.roles.reward or ctx.model}",
        "+rlloop.gad.discriminator_loss=bradley_terry",
        "+rlloop.gad.teacher_responses=<DATA_ROOT>/teacher_sft.parquet",
    ]
    student = "student: group-normalised PG on the discriminator's score; discriminator: Bradley-Terry"
    torchrun = ctx.torchrun()
    generations = f"<RESULT_ROOT>/{ctx.experiment}/generation/{_step(ctx)}.parquet"
    merging, model = checkpoint(ctx, f"<CKPT_ROOT>/{ctx.experiment}")
    generate = [
        *ctx.generation("<DATA_ROOT>/valid.parquet", generations, model),
        "data.n_samples=1",
        "rollout.temperature=0",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
    ]
    generation = chained(
        "generation",
        "merge the student's (actor's) checkpoint into a Hugging Face model (the discriminator's, under "
        "critic/ or the reward model's folder, is not needed) and generate greedily on the valid split",
        [(merging, []), (command(GENERATION, generate), generate)],
    )
    generation.command = loop(ctx, generation.command)
    evaluation = Stage(
        name="eval",
        description="score the student's generations with a GPT-4o / OpenAI-compatible judge against the "
        "teacher's responses",
        command=loop(
            ctx,
            f"python <VERL_EXT>/gad_judge.py --judge-model {ctx.roles.coach or '<JUDGE_MODEL>'} "
            f"--generations {generations} --references <DATA_ROOT>/teacher_sft_valid.parquet "
            f"--output <RESULT_ROOT>/{ctx.experiment}/eval/{_step(ctx)}.json",
        ),
        needs=["openai"],
    )
    teacher = ctx.roles.reference
    prepare = (
        f": generate them with the teacher ({teacher}), e.g. python -m {GENERATION} model.path={teacher} "
        "data.path=<DATA_ROOT>/train.parquet data.output_path=<DATA_ROOT>/teacher_sft.parquet, then rename its "
        "responses column to teacher_response"
        if teacher
        else "; name the teacher with --teacher to plan their generation"
    )
    unresolved = [
        "teacher data: <DATA_ROOT>/teacher_sft.parquet and teacher_sft_valid.parquet (prompt, teacher_response)"
        + prepare,
        "GAD checkout: its stages live on different branches; switch the checkout's branch before each stage",
    ]
    if ctx.roles.reward is None:
        unresolved.append("discriminator: none given (--discriminator); it starts from the policy model")
    return FamilyPlan(
        unresolved=unresolved,
        stages=[
            verl_stage(
                "seqkd", "SeqKD baseline: SFT on the teacher's responses, to the end", SFT, seqkd, torchrun
            ),
            verl_stage("warmup", "SFT on the teacher's responses", SFT, sft, launcher=torchrun),
            verl_stage("adversarial", student, MAIN_PPO, adversarial),
            generation,
            evaluation,
        ],
    )


def _step(ctx: PlanContext) -> str:
    return ctx.roles.checkpoint.label if ctx.roles.checkpoint else "global_step_<STEP>"


@family(
    "coach",
    "check-inputs",
    "train",
    "train-rl",
    "eval",
    "fuzzy-eval",
    "end-task-eval",
    "score",
    aliases={
        "check_inputs": "check-inputs",
        "coach_experience": "train",
        "distill": "train",
        "train-el": "train",
        "el": "train",
        "rl_baseline": "train-rl",
        "rl": "train-rl",
    },
)
def coach(ctx: PlanContext) -> FamilyPlan:
    coach_model = ctx.roles.coach or "<COACH_MODEL>"
    experience = "python -m trainers coach --config <RESULT_ROOT>/coach_experience.json"
    distill = distill_stage(
        ctx, "distill", "OPCD of the coach's experience (the paper's method)", "<RESULT_ROOT>/experience.json"
    )
    train = chained(
        "train",
        f"EL training: the coach ({coach_model}, named in the config; mode=distill, max_steps=0) scores sampled "
        "responses against the rubric and writes the experience list, then OPCD of it (the paper's method)",
        [(experience, []), (distill.command, distill.overrides)],
        needs=["openai"],
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
    results = f"<RESULT_ROOT>/{ctx.experiment}"
    merging, model = checkpoint(ctx, f"<CKPT_ROOT>/{ctx.experiment}")
    held_out = [
        *ctx.generation(
            "<DATA_ROOT>/wildchat_heldout.parquet", f"{results}/eval/{_step(ctx)}.parquet", model
        ),
        "data.n_samples=1",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
    ]
    evaluation = chained(
        "eval",
        "held-out WildChat evaluation: merge the chosen checkpoint, generate on the held-out prompts",
        [(merging, []), (command(GENERATION, held_out), held_out)],
    )
    fuzzy_out = f"{results}/fuzzy/{_step(ctx)}.parquet"
    fuzzy = [
        *ctx.generation(f"{results}/fuzzy_benchmark.parquet", fuzzy_out, model),
        "data.n_samples=1",
        f"rollout.tensor_model_parallel_size={ctx.tensor_parallel}",
    ]
    fuzzy_eval = chained(
        "fuzzy-eval",
        "fuzzy benchmark generation: the coach rewrites benchmark prompts into fuzzy variants, the policy answers",
        [
            (
                f"python <VERL_EXT>/coach_fuzzy.py --coach-model {coach_model} --benchmark <DATA_ROOT>/benchmark.parquet "
                f"--output {results}/fuzzy_benchmark.parquet",
                [],
            ),
            (merging, []),
            (command(GENERATION, fuzzy), fuzzy),
        ],
        needs=["openai"],
    )
    end_task = chained(
        "end-task-eval",
        "end-task evaluation: IF-Eval on the merged checkpoint",
        [(merging, []), (if_eval(model, f"{results}/ifeval/{_step(ctx)}"), [])],
    )
    score = Stage(
        name="score",
        description="GPT-4o / OpenAI-compatible scoring of the held-out and fuzzy generations against the rubric",
        command=f"python <VERL_EXT>/coach_score.py --judge-model {ctx.roles.coach or '<JUDGE_MODEL>'} "
        f"--generations {results}/eval/{_step(ctx)}.parquet {fuzzy_out} --output {results}/scores/{_step(ctx)}.json",
        needs=["openai"],
    )
    for stage in (evaluation, fuzzy_eval, end_task, score):
        stage.command = loop(ctx, stage.command)
    return FamilyPlan(
        [
            check_inputs_stage(ctx),
            train,
            verl_stage(
                "train-rl", "GRPO on the coach's rubric score (the RL baseline)", MAIN_PPO, rl_baseline
            ),
            evaluation,
            fuzzy_eval,
            end_task,
            score,
        ],
        prerequisites=[openai],
        notes=[distill_note(ctx.top_k)],
    )


__all__ = ["coach", "gad", "grpo", "oel", "opcd", "opo"]
