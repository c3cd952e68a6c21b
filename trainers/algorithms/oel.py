"""`oel`: Online Experiential Learning (arXiv 2603.16856) as rounds over a benchmark's samples.

Each round: (1) the policy plays episodes (here: answers prompts, rewarded by the benchmark's scorer); (2) an
extractor turns those episodes into experience items; (3) the items join the experience list (deduplicated, the
most recent kept, trimmed to what fits the model's context); (4) deploy states are collected WITHOUT the
experience (the prompts the policy will face); (5) the experience is consolidated into the weights with OPCD
(teacher = a frozen copy of the round's start policy reading the experience, student = the policy without it);
(6) the policy is evaluated. Extractors: `policy` (the model itself, prompted with `extractor_prompt`, as in the
paper; needs a capable model), `openai` (an OpenAI-compatible endpoint, as the coach), `feedback` (the
environment's feedback on failed episodes written as items: a deterministic extractor for tiny CPU models).

Single-turn only: an episode is one prompt and one completion. Multi-turn text games (FrozenLake, Sokoban) need a
benchmark with an environment step API; the round structure here stays the same for them.
"""

from __future__ import annotations

import copy
import functools
import statistics
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample, get_benchmark
from tasks.base import stop_strings
from trainers import onpolicy as op
from trainers import runtime
from trainers.algorithms.coach import Coach
from trainers.algorithms.opcd import OPCDConfig, distill
from trainers.experience import render_context, write_experience
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult
from trainers.rewards import cut_at_stop

DEFAULT_EXTRACTOR_PROMPT = (
    "Here are attempts at problems with the feedback each received. Write one short lesson per line that would "
    "help on similar problems.\n"
)


class OELConfig(OPCDConfig):
    """Round structure; `max_steps` is the number of OPCD consolidation steps per round."""

    rounds: int = Field(default=3, ge=1, description="Rounds of play, extract, consolidate, evaluate.")
    episodes_per_round: int = Field(default=32, ge=1, description="Prompts the policy answers each round.")
    extractor: Literal["policy", "openai", "feedback"] = Field(
        default="feedback",
        description="Who writes experience: the policy itself, an OpenAI-compatible endpoint, or the feedback.",
    )
    extractor_prompt: str = Field(
        default=DEFAULT_EXTRACTOR_PROMPT,
        description="Instruction before the transcripts (policy and openai).",
    )
    extractor_model: str = Field(default="gpt-4o-mini", description='Endpoint model for extractor="openai".')
    extractor_max_new_tokens: int = Field(
        default=64, ge=1, description='Most tokens of lessons the policy writes (extractor="policy").'
    )
    max_experience_items: int = Field(
        default=16, ge=1, description="Experience items kept (the most recent)."
    )
    max_steps: int = Field(default=30, description="OPCD consolidation steps per round.")


class Episode:
    """One single-turn episode: the state (prompt), the action (completion) and the environment's reward."""

    def __init__(self, sample: Sample, completion: str, reward: float) -> None:
        self.sample, self.completion, self.reward = sample, completion, reward

    def transcript(self) -> str:
        verdict = "correct" if self.reward > 0 else f"wrong, expected {self.sample.answer}"
        return f"{self.sample.prompt}{self.completion} ({verdict})"


def play(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, samples: Sequence[Sample], config: OELConfig
) -> list[Episode]:
    benchmark = get_benchmark(config.benchmark)
    rollout = op.sample(
        model,
        tokenizer,
        [s.prompt for s in samples],
        max_new_tokens=op.new_tokens_budget(config),
        temperature=config.temperature,
    )
    episodes = []
    for s, text in zip(samples, rollout.texts, strict=True):
        completion = cut_at_stop(text, stop_strings(benchmark, config.prompt_format))
        episodes.append(Episode(s, completion, float(benchmark.score(completion, s))))
    return episodes


def extract_feedback(episodes: Sequence[Episode]) -> list[str]:
    """The environment's verdict on each failed episode, as the item the model should have produced."""
    return [f"{e.sample.prompt}{e.sample.answer}" for e in episodes if e.reward <= 0]


def extract_with_policy(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, episodes: Sequence[Episode], config: OELConfig
) -> list[str]:
    """The policy itself writes lessons from its transcripts (one lesson per non-empty line)."""
    prompt = config.extractor_prompt + "\n".join(e.transcript() for e in episodes) + "\nLessons:\n"
    rollout = op.sample(
        model, tokenizer, [prompt], max_new_tokens=config.extractor_max_new_tokens, do_sample=False
    )
    return [line.strip("-* ").strip() for line in rollout.texts[0].splitlines() if line.strip("-* ").strip()]


def extract_with_endpoint(episodes: Sequence[Episode], config: OELConfig) -> list[str]:
    coach = Coach(config.extractor_model, config.extractor_prompt, timeout=60.0)
    return coach.experience(
        [e.sample for e in episodes],
        [e.completion for e in episodes],
        [e.reward for e in episodes],
        config.max_experience_items,
    )


def merge_experience(old: Sequence[str], new: Sequence[str], max_items: int) -> list[str]:
    """Old then new items, first occurrence kept, the most recent `max_items` retained."""
    seen: set[str] = set()
    merged = []
    for item in [*old, *new]:
        if item not in seen:
            seen.add(item)
            merged.append(item)
    return merged[-max_items:]


def fit_experience(
    tokenizer: PreTrainedTokenizerBase,
    model: PreTrainedModel,
    system_prompt: str | None,
    items: Sequence[str],
    samples: Sequence[Sample],
    max_new_tokens: int,
) -> list[str]:
    """Drop the oldest items until context + longest prompt + completion fits the model's positions."""
    limit = getattr(model.config, "max_position_embeddings", None)
    if limit is None:
        return list(items)
    longest = max(len(tokenizer(s.prompt)["input_ids"]) for s in samples)
    kept = list(items)
    while kept:
        context = render_context(system_prompt, kept)
        if len(tokenizer(context, add_special_tokens=False)["input_ids"]) + longest + max_new_tokens <= limit:
            break
        kept.pop(0)
    return kept


def _log_step(round_number: int, row: dict[str, float]) -> None:
    runtime.log(f"oel round {round_number} step {int(row['step'])} kl {row['kl']:.4g}")


def run(config: OELConfig) -> TrainResult:
    """`rounds` rounds of play -> extract -> consolidate (OPCD) -> evaluate; checkpoint + experience.json out."""
    config.prompts_per_step()
    if config.extractor == "openai":
        Coach(config.extractor_model, config.extractor_prompt)  # fail fast when no endpoint is configured
    op.seed_everything(config.seed)
    samples = op.load_samples(config.train_file, config.max_train_samples, op.chat_prompts(config))
    policy, tokenizer = op.load_policy(config)
    episodes_stream = op.batches(samples, config.episodes_per_round, config.seed + 1)
    max_new = op.new_tokens_budget(config)
    session = op.Session(config, policy, tokenizer, planned_steps=config.rounds * config.max_steps)
    experience: list[str] = []
    rounds: list[dict[str, Any]] = []
    tokens = 0
    for round_number in range(1, config.rounds + 1):
        if session.pace.expired():
            break
        episodes = play(policy, tokenizer, episodes_stream(), config)
        if config.extractor == "feedback":
            new_items = extract_feedback(episodes)
        elif config.extractor == "policy":
            new_items = extract_with_policy(policy, tokenizer, episodes, config)
        else:
            new_items = extract_with_endpoint(episodes, config)
        experience = merge_experience(experience, new_items, config.max_experience_items)
        experience = fit_experience(tokenizer, policy, config.context, experience, samples, max_new)
        round_row: dict[str, Any] = {
            "round": round_number,
            "episode_reward": op.mean([e.reward for e in episodes]),
            "new_items": len(new_items),
            "experience": list(experience),
        }
        if experience or config.context:
            teacher = copy.deepcopy(policy)
            teacher.eval()
            teacher.requires_grad_(False)
            deploy_states = samples  # prompts the policy meets when deployed: no experience in them
            round_config = config.model_copy(update={"seed": config.seed + round_number})
            history, used = distill(
                policy,
                teacher,
                tokenizer,
                deploy_states,
                render_context(config.context, experience),
                round_config,
                pace=session.pace,
                log=functools.partial(_log_step, round_number),
            )
            tokens += used
            del teacher
            kls = [row["kl"] for row in history]
            # medians of the first / last quarter of the round (3 steps at least): a step's KL is sampled on the
            # student's own continuations, and one hard batch lifts it 10x above its neighbours (2.4 among 0.1s)
            # (NaN when the trial's time ran out before the round's first step, as the means gave)
            edge = max(3, len(kls) // 4)
            round_row["kl_start"] = statistics.median(kls[:edge]) if kls else float("nan")
            round_row["kl_end"] = statistics.median(kls[-edge:]) if kls else float("nan")
            round_row["steps"] = len(history)
        round_row["eval_accuracy"] = op.evaluate(policy, tokenizer, config)
        rounds.append(round_row)
        runtime.log(
            f"oel round {round_number}/{config.rounds}: episode reward {round_row['episode_reward']:.3f}, "
            f"{len(experience)} experience items, eval {round_row['eval_accuracy']}"
        )

    write_experience(config.output_dir / "experience.json", experience)
    return session.finish(
        "oel",
        rounds,
        tokens=tokens,
        reward_key="episode_reward",
        loss_key="kl_end",
        steps=sum(int(r.get("steps", 0)) for r in rounds),
        eval_after=rounds[-1]["eval_accuracy"] if rounds else session.eval_before,
        extra={"rounds": len(rounds), "experience_items": len(experience)},
    )


register_recipe(
    Recipe(
        name="oel",
        description="Online experiential learning: rounds of play, experience extraction and OPCD consolidation.",
        config_class=OELConfig,
        run=run,
    )
)
