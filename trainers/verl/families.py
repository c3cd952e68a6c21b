"""The built-in families' builders, one function each: the stages a family runs, in order, as verl commands.

Stage names are the ones the LMOps families use (OPCD's on-policy / off-policy, OEL's extraction ... evaluation,
the coach's train ... score, GAD's SeqKD ... eval, OPO's config); rlloop's earlier names stay as aliases. Each
builder takes the validated `PlanContext` and returns a `FamilyPlan`; what every plan shares (validation, the
cluster checklist, credentials, placeholders, roots, what is unresolved) is added by `trainers.verl.plan.plan`, and
the override blocks several families use live in `trainers.verl.builders`.
"""

from __future__ import annotations

from trainers.verl.builders import (
    BENCHMARK_REWARD,
    EVALUATION,
    EXTENSIONS,
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
    context_gap,
    distill_note,
    distill_stage,
    exact_on_policy,
    family,
    loop,
    merge_latest,
    teacher_gap,
    verl_stage,
)


@family("grpo", "train")
def grpo(ctx: PlanContext) -> FamilyPlan:
    quarter = ctx.train_batch_size // 4  # four optimiser steps per batch, where every GPU still gets a share
    mini = quarter if quarter and ctx.per_gpu(quarter) else ctx.train_batch_size
    overrides = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(mini_batch=mini),
        BENCHMARK_REWARD,
        "actor_rollout_ref.actor.use_kl_loss=True",
        "actor_rollout_ref.actor.kl_loss_coef=0.001",
        f"actor_rollout_ref.actor.ppo_mini_batch_size={mini}",
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
        "on-policy context distillation: student without context, teacher = frozen start model (verl's "
        "reference, which reads the student's prompt: see the unresolved teacher context)"
    )
    context = ctx.context_file()
    on_policy = distill_stage(ctx, "on-policy", description, context)
    return FamilyPlan(
        [check_inputs_stage(ctx), on_policy, off_policy(ctx, context)],
        notes=[distill_note(ctx.top_k), OFF_POLICY_NOTE],
        unresolved=[context_gap(context), *teacher_gap(ctx)],
    )


OFF_POLICY_NOTE = (
    "Off-policy OPCD on verl distils the teacher's trajectories (SFT on them); verl's generation server returns "
    "text only, so the teacher's top-k logits are not saved."
)


def off_policy(ctx: PlanContext, context: str) -> Stage:
    """The off-policy baseline: the teacher, context in its prompt, writes trajectories; the student is then
    trained on them without the context (SFT on chat rows)."""
    root = f"<RESULT_ROOT>/{ctx.run}/off_policy_data"
    prompts, saved, rows = (
        f"{root}/with_context.parquet",
        f"{root}/trajectories.parquet",
        f"{root}/sft.parquet",
    )
    teacher = ctx.roles.reference or ctx.model
    add = f"python -m {EXTENSIONS}.data add-context --context {context} --input {ctx.data_file('train.parquet')} --output {prompts}"
    generate = ctx.generation(prompts, saved, teacher)
    to_sft = f"python -m {EXTENSIONS}.data to-sft --input {saved} --output {rows}"
    out = f"<CKPT_ROOT>/{ctx.run}/off_policy"
    train = ctx.sft(rows, rows, ctx.model, out, f"{ctx.experiment}-offp")
    return chained(
        "off-policy",
        "off-policy context distillation (baseline): teacher trajectories with the context in the prompt, then "
        "the student trained on them without it",
        [
            (add, []),
            (command(GENERATION, generate), generate),
            (to_sft, []),
            (command(SFT, train, launcher=ctx.torchrun()), train),
        ],
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
    rounds = f"<CKPT_ROOT>/{ctx.run}/round_<r>"
    rollout = ctx.generation(
        ctx.data_file("train.parquet"),
        "<RESULT_ROOT>/oel/round_<r>/episodes.parquet",
        ctx.model,
        samples=ctx.rollout_n,
    )
    experience = ctx.context_file()
    extractor = f" --extractor-model {ctx.roles.coach}" if ctx.roles.coach else ""
    extract = Stage(
        name="extraction",
        description="extract experience items from the episodes with the extractor prompt, merge into the list",
        command="python <VERL_EXT>/oel_extract.py --episodes <RESULT_ROOT>/oel/round_<r>/episodes.parquet "
        f"--experience {experience}{extractor}",
    )
    distill = distill_stage(ctx, "consolidation", "", experience, checkpoint_dir=rounds)
    merging, _ = merge_latest(rounds)
    consolidate = chained(
        "consolidation",
        "OPCD of the experience list into the weights (deploy states without experience), then the round's "
        "last checkpoint merged into a Hugging Face folder for the next round",
        [(distill.command, distill.overrides), (merging, [])],
    )
    first = (
        f"play episodes with the current policy; repeat stages 1-4 for r=1..{ctx.rounds}, and from round 2 on "
        f"set actor_rollout_ref.model.path=<CKPT_ROOT>/{ctx.run}/round_<r-1>/huggingface (merged by "
        "the consolidation stage)"
    )
    notes = [
        distill_note(ctx.top_k),
        "Multi-turn games (FrozenLake, Sokoban) need verl's agent-loop rollout and rlloop's game loop "
        "(<VERL_EXT>/text_game_agent_loop.yaml, not written yet).",
    ]
    return FamilyPlan(
        [verl_stage("deploy", first, GENERATION, rollout), extract, consolidate, oel_evaluation(ctx, rounds)],
        notes=notes,
        unresolved=[context_gap(experience), *teacher_gap(ctx)],
    )


def oel_evaluation(ctx: PlanContext, rounds: str) -> Stage:
    """Greedy generations on the valid split, scored; with --checkpoint-step, from that merged checkpoint of the
    round, followed by IF-Eval on it."""
    generations = "<RESULT_ROOT>/oel/round_<r>/eval_generations.parquet"
    model = f"{rounds}/huggingface"  # merged by the consolidation stage
    parts: list[tuple[str, list[str]]] = []
    if ctx.roles.checkpoint:
        merging, model = checkpoint(ctx, rounds)
        parts.append((merging, []))
    eval_generation = ctx.generation(ctx.data_file("valid.parquet"), generations, model, greedy=True)
    eval_score = [  # main_eval reads its reward function from reward.* (get_custom_reward_fn), which
        # verl's evaluation config lacks: appended
        f"data.path={generations}",
        f"+{BENCHMARK_REWARD}",
        "+reward.custom_reward_function.name=compute_score",
    ]
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
    warm = f"<CKPT_ROOT>/{ctx.run}/sft"
    teacher_data = ("<DATA_ROOT>/teacher_sft.parquet", "<DATA_ROOT>/teacher_sft_valid.parquet")
    seqkd = ctx.sft(
        *teacher_data,
        ctx.model,
        f"<CKPT_ROOT>/{ctx.run}/seqkd",
        f"{ctx.experiment}-seqkd",
    )
    sft = ctx.sft(*teacher_data, ctx.model, warm, f"{ctx.experiment}-sft")
    merge_warm, warm_model = merge_latest(warm, role="")
    adversarial = [
        "algorithm.adv_estimator=grpo",
        *ctx.common(model=warm_model),
        *exact_on_policy(ctx.train_batch_size),
        "reward.reward_model.enable=True",
        f"reward.reward_model.model_path={ctx.roles.reward or ctx.model}",
        "reward.reward_model.rollout.name=vllm",
    ]
    student = "student: group-normalised PG on the discriminator's score (verl's reward model; it is not trained here)"
    torchrun = ctx.torchrun()
    generations = f"<RESULT_ROOT>/{ctx.run}/generation/{_step(ctx)}.parquet"
    merging, model = checkpoint(ctx, f"<CKPT_ROOT>/{ctx.run}")
    generate = ctx.generation("<DATA_ROOT>/valid.parquet", generations, model, greedy=True)
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
            f"--output <RESULT_ROOT>/{ctx.run}/eval/{_step(ctx)}.json",
        ),
        needs=["openai"],
    )
    teacher = ctx.roles.reference
    prepare = (
        f": generate them with the teacher ({teacher}), e.g. python -m {GENERATION} "
        f"actor_rollout_ref.model.path={teacher} data.train_files=<DATA_ROOT>/train.parquet "
        "+data.output_path=<DATA_ROOT>/teacher.parquet, then python -m "
        f"{EXTENSIONS}.data to-sft --input <DATA_ROOT>/teacher.parquet --output <DATA_ROOT>/teacher_sft.parquet"
        if teacher
        else "; name the teacher with --teacher to plan their generation"
    )
    unresolved = [
        "teacher data: <DATA_ROOT>/teacher_sft.parquet and teacher_sft_valid.parquet (chat `messages` rows: "
        "the prompt, then the teacher's response)" + prepare,
        "GAD discriminator training (Bradley-Terry on teacher vs student responses) has no verl 0.9.1 hook: the "
        "adversarial stage scores with a fixed discriminator (verl's reward model); rlloop's in-process gad "
        "recipe trains it",
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
            chained(
                "adversarial",
                f"merge the warm-up's last checkpoint into a Hugging Face folder, then {student}",
                [(merge_warm, []), (command(MAIN_PPO, adversarial), adversarial)],
            ),
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
        "reward.custom_reward_function.path=<VERL_EXT>/coach_reward.py",
    ]
    openai = Prerequisite(
        item="OpenAI-compatible coach",
        detail="OPENAI_BASE_URL and OPENAI_API_KEY reachable from the driver node",
    )
    results = f"<RESULT_ROOT>/{ctx.run}"
    merging, model = checkpoint(ctx, f"<CKPT_ROOT>/{ctx.run}")
    held_out = ctx.generation(
        "<DATA_ROOT>/wildchat_heldout.parquet", f"{results}/eval/{_step(ctx)}.parquet", model
    )
    evaluation = chained(
        "eval",
        "held-out WildChat evaluation: merge the chosen checkpoint, generate on the held-out prompts",
        [(merging, []), (command(GENERATION, held_out), held_out)],
    )
    fuzzy_out = f"{results}/fuzzy/{_step(ctx)}.parquet"
    fuzzy = ctx.generation(f"{results}/fuzzy_benchmark.parquet", fuzzy_out, model)
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
        unresolved=[context_gap("<RESULT_ROOT>/experience.json"), *teacher_gap(ctx)],
    )


__all__ = ["coach", "gad", "grpo", "oel", "opcd", "opo"]
