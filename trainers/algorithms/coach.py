"""`coach`: LLM-as-a-Coach (arXiv 2607.18110) through any OpenAI-compatible endpoint.

A stronger model (the coach), reached via OPENAI_BASE_URL / OPENAI_API_KEY with the `openai` SDK, scores the
policy's responses against a rubric and writes experience: short, general lessons drawn from the scored responses.
`mode="distill"` (the paper's method) distils that experience into the weights with on-policy context
distillation (OPCD, see opcd.py); `mode="rl"` is its RL baseline: GRPO-style group-normalised policy gradient on
the coach's score. Without an endpoint the recipe stops at once with the variables to set.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from typing import Any, Literal, TypeVar

import torch
from pydantic import BaseModel, Field, ValidationError

from tasks import Sample
from trainers import losses, runtime
from trainers import onpolicy as op
from trainers.algorithms.opcd import OPCDConfig, distill_and_finish
from trainers.experience import render_context, write_experience
from trainers.finish import prepare_output_dir
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainerSetupError, TrainResult

DEFAULT_RUBRIC = (
    "Score 1.0 when the response gives the correct final answer in the required format and nothing else, "
    "0.5 when the answer is right but the format is not, 0.0 otherwise."
)


class CoachUnavailable(TrainerSetupError):
    """No coach endpoint is configured."""


class CoachReplyError(ValueError):
    """The coach answered, but not in the JSON shape asked for."""


class CoachConfig(OPCDConfig):
    """The coach endpoint's model, the rubric, and which use of the coach to train with."""

    mode: Literal["distill", "rl"] = Field(
        default="distill",
        description="distill: OPCD on the coach's written experience (the paper); rl: PG on the coach's score.",
    )
    coach_model: str = Field(default="gpt-4o-mini", description="Model name at the coach endpoint.")
    rubric: str = Field(default=DEFAULT_RUBRIC, description="What the coach scores responses against.")
    show_reference: bool = Field(
        default=True, description="Give the coach the reference answer along with each response."
    )
    experience_samples: int = Field(
        default=16, ge=1, description="Responses the coach reviews to write experience (distill mode)."
    )
    max_experience_items: int = Field(default=8, ge=1, description="Most lessons the coach may write.")
    request_timeout: float = Field(default=120.0, gt=0, description="Seconds to wait for each coach reply.")
    num_generations: int = Field(
        default=8, description="rl mode: group size; distill mode: OPCD samples per prompt."
    )
    per_device_train_batch_size: int = 32


class _Scores(BaseModel):
    scores: list[float]


class _Experience(BaseModel):
    experience: list[str]


ReplyT = TypeVar("ReplyT", bound=BaseModel)


class Coach:
    """Talks to the coach model; every call asks for a JSON object and validates it."""

    def __init__(
        self, model: str, rubric: str, *, show_reference: bool = True, timeout: float = 120.0
    ) -> None:
        from openai import OpenAI

        base_url = os.environ.get("OPENAI_BASE_URL", "").strip()
        api_key = os.environ.get("OPENAI_API_KEY", "").strip()
        if not base_url or not api_key:
            missing = " and ".join(
                n for n, v in (("OPENAI_BASE_URL", base_url), ("OPENAI_API_KEY", api_key)) if not v
            )
            raise CoachUnavailable(
                f"the coach needs an OpenAI-compatible endpoint: set {missing} "
                "(e.g. OPENAI_BASE_URL=https://api.openai.com/v1 or a local vLLM server's http://HOST:PORT/v1)"
            )
        self.client = OpenAI(base_url=base_url, api_key=api_key, timeout=timeout, max_retries=2)
        self.model = model
        self.rubric = rubric
        self.show_reference = show_reference

    def _ask(self, system: str, payload: dict[str, Any], reply: type[ReplyT], lacks: str) -> ReplyT:
        """The coach's reply to `payload`, as `reply`; a reply not of that shape says what it `lacks`."""
        response = self.client.chat.completions.create(
            model=self.model,
            messages=[
                {"role": "system", "content": system},
                {"role": "user", "content": json.dumps(payload, ensure_ascii=False)},
            ],
            response_format={"type": "json_object"},
            temperature=0.0,
        )
        content = response.choices[0].message.content or ""
        try:
            data = json.loads(content)
        except json.JSONDecodeError as exc:
            raise CoachReplyError(f"coach reply is not JSON ({exc.msg}): {content[:200]!r}") from exc
        if not isinstance(data, dict):
            raise CoachReplyError(f"coach reply is not a JSON object: {content[:200]!r}")
        try:
            return reply.model_validate(data)
        except ValidationError as exc:
            raise CoachReplyError(f"coach reply lacks {lacks}: {json.dumps(data)[:200]}") from exc

    def _items(self, samples: Sequence[Sample], responses: Sequence[str]) -> list[dict[str, Any]]:
        items = []
        for i, (s, r) in enumerate(zip(samples, responses, strict=True)):
            item: dict[str, Any] = {"id": i, "prompt": s.prompt, "response": r}
            if self.show_reference:
                item["reference"] = s.answer
            items.append(item)
        return items

    def score(self, samples: Sequence[Sample], responses: Sequence[str]) -> list[float]:
        """One score in [0, 1] per response, in order."""
        system = (
            "You are a coach grading a student model's responses against this rubric:\n"
            f"{self.rubric}\n"
            'Reply with a JSON object {"scores": [...]}: one number in [0, 1] per item, in the order given.'
        )
        scores = self._ask(
            system, {"items": self._items(samples, responses)}, _Scores, 'a numeric "scores" list'
        ).scores
        if len(scores) != len(responses):
            raise CoachReplyError(f"coach returned {len(scores)} scores for {len(responses)} responses")
        return [min(1.0, max(0.0, float(x))) for x in scores]

    def experience(
        self, samples: Sequence[Sample], responses: Sequence[str], scores: Sequence[float], max_items: int
    ) -> list[str]:
        """Short general lessons from scored responses, for the student to internalise."""
        system = (
            "You are a coach. From a student model's scored responses (rubric below), write at most "
            f"{max_items} short, general lessons that would raise its score on new problems of this kind. "
            f'Reply with a JSON object {{"experience": ["lesson", ...]}}.\nRubric:\n{self.rubric}'
        )
        items = self._items(samples, responses)
        for item, value in zip(items, scores, strict=True):
            item["score"] = value
        lessons = self._ask(
            system, {"items": items}, _Experience, 'an "experience" list of strings'
        ).experience
        lessons = [x.strip() for x in lessons if x.strip()][:max_items]
        if not lessons:
            raise CoachReplyError("coach wrote no experience items")
        return lessons


def coach_from(config: CoachConfig) -> Coach:
    return Coach(
        config.coach_model,
        config.rubric,
        show_reference=config.show_reference,
        timeout=config.request_timeout,
    )


def _run_distill(config: CoachConfig, coach: Coach) -> TrainResult:
    samples = op.load_samples(config.train_file, config.max_train_samples, op.chat_prompts(config))
    student, tokenizer = op.load_policy(config)
    teacher = op.load_frozen(config.model_path)
    prepare_output_dir(config.output_dir)  # no stale metrics.json while the coach is asked
    reviewed = samples[: config.experience_samples]
    rollout = op.sample(
        student,
        tokenizer,
        [s.prompt for s in reviewed],
        max_new_tokens=op.new_tokens_budget(config),
        do_sample=False,
    )
    scores = coach.score(reviewed, rollout.texts)
    lessons = coach.experience(reviewed, rollout.texts, scores, config.max_experience_items)
    runtime.log(f"coach: mean score {op.mean(scores):.3f} on {len(scores)} responses; {len(lessons)} lessons")
    write_experience(config.output_dir / "experience.json", lessons)
    return distill_and_finish(
        "coach",
        op.Session(config, student, tokenizer),
        teacher,
        samples,
        render_context(config.context, lessons),
        label="coach-distill",
        extra={"coach_score_before": op.mean(scores), "experience_items": len(lessons)},
    )


def _run_rl(config: CoachConfig, coach: Coach) -> TrainResult:
    samples = op.load_samples(config.train_file, config.max_train_samples, op.chat_prompts(config))
    student, tokenizer = op.load_policy(config)
    max_new = op.new_tokens_budget(config)
    optimizer = op.optimizer_for(student, config.learning_rate)
    session = op.Session(config, student, tokenizer)
    history: list[dict[str, float]] = []
    for step_number, batch, rollout in session.rollouts(optimizer, samples, max_new):
        rewards = torch.tensor(coach.score(batch, rollout.texts), device=rollout.lengths.device)
        advantages = losses.group_advantages(rewards, config.num_generations)
        loss = op.policy_gradient_step(
            student, optimizer, rollout, advantages, float(len(batch) * max_new), config.max_grad_norm
        )
        history.append({"step": float(step_number), "coach_score": float(rewards.mean()), "loss": loss})
        if session.log_due(step_number):
            runtime.log(
                f"coach-rl step {session.of_steps(step_number)} coach_score {float(rewards.mean()):.4g}"
            )
    return session.finish("coach", history, tokens=session.rollout_tokens, reward_key="coach_score")


def run(config: CoachConfig) -> TrainResult:
    """Coach-guided training; fails fast (before loading any model) when no endpoint is configured."""
    config.prompts_per_step()
    coach = coach_from(config)
    op.seed_everything(config.seed)
    return _run_distill(config, coach) if config.mode == "distill" else _run_rl(config, coach)


register_recipe(
    Recipe(
        name="coach",
        description="LLM-as-a-Coach via an OpenAI-compatible endpoint: distil its experience (OPCD) or RL on its score.",
        config_class=CoachConfig,
        run=run,
    )
)
