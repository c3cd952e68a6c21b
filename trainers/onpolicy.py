"""The plumbing the hand-written recipes (OPO, OPCD, GAD, coach, OEL) share: load, sample, score, evaluate, finish.

Kept as small functions over plain tensors so each recipe file reads as its paper's loop and nothing else; a
`Session` holds what every such run reports (the clock, the evaluation before and after) and ends it through the
one finish path, `trainers.finish.finish_run`.
A rollout is left-padded prompts followed by the sampled completion, so the completion occupies the same last
T columns whatever prompt (with or without context) it is re-scored under.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Generic, Literal, TypeVar

import torch
from pydantic import Field, model_validator
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample, get_benchmark
from tasks.base import stop_strings
from tasks.chat import ChatPrompts
from trainers import device, losses, runtime
from trainers.config import TrainerConfig
from trainers.data import RowMoves, batches, chat_prompts, read_jsonl
from trainers.finish import finish_run, prepare_output_dir
from trainers.quick_eval import accuracy
from trainers.result import TrainResult
from trainers.rewards import cut_at_stop
from trainers.runtime import Pace

RewardFn = Callable[[Sequence[str], Sequence[Sample]], list[float]]


class OnPolicyConfig(TrainerConfig):
    """Fields of every recipe that samples from its own policy. `per_device_train_batch_size` counts completions
    per step and must be a multiple of `num_generations` (as TRL's GRPO)."""

    per_device_train_batch_size: int = Field(
        default=32, description="Completions per optimizer step: prompts per step x num_generations."
    )
    num_generations: int = Field(default=8, ge=1, description="Completions sampled per prompt (the group).")
    max_new_tokens: int | None = Field(
        default=None,
        ge=1,
        description="Most tokens sampled per completion; None: the benchmark's eval budget.",
    )
    temperature: float = Field(default=1.0, gt=0, description="Sampling temperature of the rollouts.")
    max_grad_norm: float = Field(default=1.0, gt=0, description="Gradient norm clip before each step.")
    eval_file: Path | None = Field(
        default=None,
        description="JSONL scored greedily before and after training (eval_accuracy in metrics.json).",
    )
    eval_samples: int = Field(default=200, ge=1, description="How many samples of eval_file are scored.")

    @model_validator(mode="after")
    def _batch_holds_whole_groups(self) -> OnPolicyConfig:
        self.prompts_per_step()
        return self

    def prompts_per_step(self) -> int:
        if self.per_device_train_batch_size % self.num_generations:
            raise ValueError(
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) must be a multiple of "
                f"num_generations ({self.num_generations}); change one of them"
            )
        return self.per_device_train_batch_size // self.num_generations


def seed_everything(seed: int) -> None:
    runtime.seed_everything(seed)


def load_samples(
    path: Path, limit: int | None = None, chat: ChatPrompts | None = None, moves: RowMoves | None = None
) -> list[Sample]:
    """Workspace JSONL as Samples (trainers.data.read_jsonl: DataFileError naming file and line when wrong); with
    `chat`, prompts rendered in the model's chat template (trainers.data.chat_prompts); with `moves`, the rows as a
    config's train-row choices leave them."""
    return [
        Sample(id=r["id"], prompt=r["prompt"], answer=r["answer"])
        for r in read_jsonl(Path(path), limit=limit, chat=chat, moves=moves)
    ]


def load_policy(config: TrainerConfig) -> tuple[PreTrainedModel, PreTrainedTokenizerBase]:
    """The trainable model on `trainers.device`'s device and dtype (wrapped with LoRA adapters when `config.lora`,
    with gradient checkpointing when asked) and its tokenizer; torch on the config's threads from here on."""
    runtime.use_threads(config.torch_threads)
    model, tokenizer = runtime.load_model_and_tokenizer(Path(config.model_path))
    if config.gradient_checkpointing:
        device.enable_gradient_checkpointing(model)
    lora = runtime.peft_config(config)
    if lora is not None:
        from peft import get_peft_model

        model = get_peft_model(model, lora)  # type: ignore[assignment]
    model.train()
    return model, tokenizer


def load_frozen(path: Path) -> PreTrainedModel:
    """A frozen copy of a checkpoint (the OPCD teacher) beside the policy, in eval mode with no gradients."""
    model = device.load_causal_lm(path)
    model.eval()
    model.requires_grad_(False)
    return model


def benchmark_reward(name: str, prompt_format: str = "plain") -> RewardFn:
    """The benchmark's own scorer (after its stop strings for `prompt_format`), so training rewards agree with the
    grader."""
    benchmark = get_benchmark(name)
    stop = stop_strings(benchmark, prompt_format)

    def reward(completions: Sequence[str], samples: Sequence[Sample]) -> list[float]:
        return [
            float(benchmark.score(cut_at_stop(c, stop), s)) for c, s in zip(completions, samples, strict=True)
        ]

    return reward


def new_tokens_budget(config: OnPolicyConfig) -> int:
    return config.max_new_tokens or int(get_benchmark(config.benchmark).max_new_tokens)


@dataclass
class Rollout:
    """Sampled completions. `sequences` = left-padded prompt ids + completion ids; the completion is the last
    `completion_ids.shape[1]` columns. `completion_mask` keeps tokens up to and including the first EOS."""

    sequences: torch.Tensor
    attention_mask: torch.Tensor
    completion_ids: torch.Tensor
    completion_mask: torch.Tensor
    texts: list[str]

    @property
    def lengths(self) -> torch.Tensor:
        return self.completion_mask.sum(dim=1)


def mask_to_first_eos(completion_ids: torch.Tensor, eos_token_id: int | None) -> torch.Tensor:
    """1 for each token up to and including a completion's first EOS; every token of one that never ended (cut at
    max_new_tokens). The "never ended" fill is a long tensor: filled like the bool `is_eos`, `width` became True,
    and a cut completion kept its first two tokens only (found by the GPU check's generation figures)."""
    if eos_token_id is None:
        return torch.ones_like(completion_ids)
    is_eos = completion_ids == eos_token_id
    width = completion_ids.shape[1]
    never_ended = torch.full(
        (completion_ids.shape[0],), width, dtype=torch.long, device=completion_ids.device
    )
    first_eos = torch.where(is_eos.any(dim=1), is_eos.int().argmax(dim=1), never_ended)
    positions = torch.arange(width, device=completion_ids.device).unsqueeze(0)
    return (positions <= first_eos.unsqueeze(1)).long()


def encode_prompts(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[str], on: torch.device | str = "cpu"
) -> tuple[torch.Tensor, torch.Tensor]:
    """Left-padded prompt ids and attention mask, on device `on`."""
    previous = tokenizer.padding_side
    tokenizer.padding_side = "left"
    try:
        enc = tokenizer(list(prompts), return_tensors="pt", padding=True)
    finally:
        tokenizer.padding_side = previous
    return enc["input_ids"].to(on), enc["attention_mask"].to(on)


def device_of(model: torch.nn.Module) -> torch.device:
    """The device `model`'s weights are on: where its inputs, rewards and advantages must be made."""
    return next(model.parameters()).device


@torch.no_grad()
def sample(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    *,
    max_new_tokens: int,
    temperature: float = 1.0,
    do_sample: bool = True,
) -> Rollout:
    """One completion per prompt (repeat prompts for groups), sampled from the current policy."""
    was_training = model.training
    model.eval()
    try:
        ids, mask = encode_prompts(tokenizer, prompts, device_of(model))
        generated = model.generate(  # type: ignore[operator]
            input_ids=ids,
            attention_mask=mask,
            max_new_tokens=max_new_tokens,
            do_sample=do_sample,
            temperature=temperature if do_sample else None,
            top_k=0 if do_sample else None,
            top_p=1.0 if do_sample else None,
            pad_token_id=tokenizer.pad_token_id,
            eos_token_id=tokenizer.eos_token_id,
        )
    finally:
        model.train(was_training)
    completion_ids = generated[:, ids.shape[1] :]
    completion_mask = mask_to_first_eos(completion_ids, tokenizer.eos_token_id)
    texts = tokenizer.batch_decode(completion_ids * completion_mask, skip_special_tokens=True)
    return Rollout(
        sequences=generated,
        attention_mask=torch.cat([mask, completion_mask], dim=1),
        completion_ids=completion_ids,
        completion_mask=completion_mask,
        texts=texts,
    )


def with_prompts(
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[str],
    completion_ids: torch.Tensor,
    completion_mask: torch.Tensor,
) -> tuple[torch.Tensor, torch.Tensor]:
    """The same completions behind different prompts (e.g. context + prompt for a teacher), on their device."""
    ids, mask = encode_prompts(tokenizer, prompts, completion_ids.device)
    return torch.cat([ids, completion_ids], dim=1), torch.cat([mask, completion_mask], dim=1)


def completion_logits(
    model: PreTrainedModel, sequences: torch.Tensor, attention_mask: torch.Tensor, completion_width: int
) -> torch.Tensor:
    """Logits [B, T, V] that predict the last `completion_width` tokens; positions count only real tokens."""
    position_ids = (attention_mask.cumsum(dim=1) - 1).clamp(min=0)
    logits = model(input_ids=sequences, attention_mask=attention_mask, position_ids=position_ids).logits
    start = sequences.shape[1] - completion_width
    return logits[:, start - 1 : -1, :]


def token_logprobs(logits: torch.Tensor, token_ids: torch.Tensor) -> torch.Tensor:
    """log p(token) at each position, [B, T]."""
    return torch.log_softmax(logits.float(), dim=-1).gather(-1, token_ids.unsqueeze(-1)).squeeze(-1)


def optimizer_for(model: torch.nn.Module, learning_rate: float) -> torch.optim.Optimizer:
    params = [p for p in model.parameters() if p.requires_grad]
    return torch.optim.AdamW(params, lr=learning_rate, weight_decay=0.0)


def step(
    model: torch.nn.Module, optimizer: torch.optim.Optimizer, loss: torch.Tensor, max_grad_norm: float
) -> None:
    """Backward, clip, one optimiser step."""
    optimizer.zero_grad(set_to_none=True)
    loss.backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], max_grad_norm)
    optimizer.step()


def policy_gradient_step(
    model: PreTrainedModel,
    optimizer: torch.optim.Optimizer,
    rollout: Rollout,
    advantages: torch.Tensor,
    normaliser: float | None,
    max_grad_norm: float,
) -> float:
    """One exactly on-policy step on `rollout`: the policy-gradient loss of `advantages` over the completion
    tokens (`losses.policy_gradient_loss`), backward, clip, step. Returns the loss."""
    logits = completion_logits(
        model, rollout.sequences, rollout.attention_mask, rollout.completion_ids.shape[1]
    )
    loss = losses.policy_gradient_loss(
        token_logprobs(logits, rollout.completion_ids),
        advantages.to(logits.device),
        rollout.completion_mask,
        normaliser=normaliser,
    )
    step(model, optimizer, loss, max_grad_norm)
    return float(loss.detach())


def evaluate(
    model: PreTrainedModel, tokenizer: PreTrainedTokenizerBase, config: OnPolicyConfig
) -> float | None:
    """Greedy accuracy on the first `eval_samples` of `eval_file`; None when no eval file is configured."""
    chat = chat_prompts(config) if config.eval_file is not None else None
    return evaluate_on(model, tokenizer, config.eval_file, config.eval_samples, config.benchmark, chat=chat)


def evaluate_on(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    eval_file: Path | None,
    eval_samples: int,
    benchmark: str,
    *,
    chat: ChatPrompts | None = None,
) -> float | None:
    """Greedy accuracy on the first `eval_samples` of `eval_file` under `benchmark`'s scorer; None without a file
    (the `eval_accuracy_before` / `eval_accuracy` figures of metrics.json, for every recipe that has an eval_file)."""
    if eval_file is None:
        return None
    samples = load_samples(eval_file, eval_samples, chat)
    return accuracy(
        model, tokenizer, samples, get_benchmark(benchmark), prompt_format="chat" if chat else "plain"
    )


def mean(values: Sequence[float]) -> float:
    return float(sum(values) / len(values)) if values else float("nan")


ConfigT = TypeVar("ConfigT", bound=OnPolicyConfig)


class Session(Generic[ConfigT]):
    """One hand-written run from its output folder to its metrics.json: the policy, the trial's clock and schedule
    (`pace`) and the evaluation before training. Starting one clears a stale metrics.json and scores the start
    policy on `eval_file`; the training window opens after that, so `train_seconds` counts training only (the
    trial's wall seconds count it all). `planned_steps`: the steps the schedule spans, when not `max_steps`."""

    def __init__(
        self,
        config: ConfigT,
        model: PreTrainedModel,
        tokenizer: PreTrainedTokenizerBase,
        planned_steps: int | None = None,
    ) -> None:
        self.config = config
        self.model = model
        self.tokenizer = tokenizer
        prepare_output_dir(Path(config.output_dir))
        self.eval_before = evaluate(model, tokenizer, config)
        self.rollout_tokens = 0  # prompt and completion tokens of the batches `rollouts` drew
        self.pace = Pace(config, planned_steps)
        self.pace.begin_training(model)

    def begin_step(self, *optimizers: torch.optim.Optimizer) -> bool:
        """Before each optimizer step: its rate set on `optimizers` by the schedule; False: stop and save now."""
        return self.pace.begin_step(*optimizers)

    def rollouts(
        self, optimizer: torch.optim.Optimizer, samples: Sequence[Sample], max_new_tokens: int
    ) -> Iterator[tuple[int, list[Sample], Rollout]]:
        """Each step the clock allows (`begin_step`): its number, a batch of `prompts_per_step` prompts drawn from
        `samples`, each repeated `num_generations` times, and the policy's completions of them."""
        next_batch = batches(samples, self.config.prompts_per_step(), self.config.seed)
        for step_number in itertools.count(1):
            if not self.begin_step(optimizer):
                return
            batch = [s for s in next_batch() for _ in range(self.config.num_generations)]
            rollout = sample(
                self.model,
                self.tokenizer,
                [s.prompt for s in batch],
                max_new_tokens=max_new_tokens,
                temperature=self.config.temperature,
            )
            self.rollout_tokens += int(rollout.attention_mask.sum())
            yield step_number, batch, rollout

    def _with_rate(self, row: Mapping[str, Any]) -> Mapping[str, Any]:
        """A per-step row with the learning rate its step took (as TRL's log rows carry it)."""
        step = row.get("step")
        factors = self.pace.factors
        if "learning_rate" in row or not isinstance(step, int | float) or not 1 <= step <= len(factors):
            return row
        return {**row, "learning_rate": factors[int(step) - 1] * self.config.learning_rate}

    def of_steps(self, step_number: int) -> str:
        """ "12/100" for a progress line ("12" for a trial bounded by seconds alone)."""
        planned = self.pace.clock.max_steps
        return f"{step_number}/{planned}" if planned else str(step_number)

    def log_due(self, step_number: int) -> bool:
        """Whether step `step_number` gets a progress line (the first, then every `logging_steps`)."""
        return step_number % self.config.logging_steps == 0 or step_number == 1

    def finish(
        self,
        recipe: str,
        history: Sequence[Mapping[str, Any]],
        *,
        tokens: int,
        reward_key: str | None = None,
        loss_key: str = "loss",
        steps: int | None = None,
        eval_after: float | None | Literal["now"] = "now",
        extra: Mapping[str, float | None] | None = None,
    ) -> TrainResult:
        """Evaluate the trained policy (unless `eval_after` is given) and save it all (`finish_run`). `history` has
        one row per step unless `steps` says otherwise."""
        train_seconds = self.pace.elapsed
        steps = len(history) if steps is None else steps
        history = [self._with_rate(row) for row in history]
        losses = [float(r[loss_key]) for r in history if isinstance(r.get(loss_key), int | float)]
        return finish_run(
            recipe=recipe,
            config=self.config,
            model=self.model,
            tokenizer=self.tokenizer,
            history=history,
            train_seconds=train_seconds,
            steps=steps,
            samples_seen=steps * self.config.per_device_train_batch_size,
            stopped_early=self.pace.ran_out_of_time(),
            train_loss=mean(losses) if losses else None,
            reward_key=reward_key,
            train_tokens=tokens,
            eval_before=self.eval_before,
            eval_after=evaluate(self.model, self.tokenizer, self.config)
            if eval_after == "now"
            else eval_after,
            extra=extra,
            pace=self.pace,
        )
