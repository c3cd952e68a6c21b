"""`dpo`: Direct Preference Optimization with TRL's DPOTrainer, on pairs built from the train JSONL.

chosen = the reference answer; rejected = a wrong answer: either a perturbation of the reference (numbers nudged
by a non-zero offset, text with characters swapped) or, with `rejected_source="policy"`, a completion sampled
from the start policy that the benchmark scores as wrong (falling back to a perturbation when every sample for a
prompt was right).
"""

from __future__ import annotations

import random
from pathlib import Path
from typing import Literal

from pydantic import Field
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from tasks import Sample, get_benchmark
from tasks.answers import normalize_number
from tasks.base import stop_strings
from trainers import onpolicy as op
from trainers import runtime
from trainers.config import TrainerConfig
from trainers.finish import finish_trl, plain_model, prepare_output_dir
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainResult
from trainers.rewards import cut_at_stop


class DPOConfig(TrainerConfig):
    """DPO's knobs; the rest of TRL's DPOConfig keeps its defaults."""

    learning_rate: float = 5e-5
    max_steps: int | None = 100
    per_device_train_batch_size: int = 16
    beta: float = Field(default=0.1, gt=0, description="Strength of the implicit KL to the start model.")
    loss_type: str = Field(
        default="sigmoid", description="Any of TRL's DPO loss types (sigmoid, ipo, hinge, robust, ...)."
    )
    rejected_source: Literal["perturb", "policy"] = Field(
        default="perturb",
        description="Rejected answers: the reference perturbed, or a wrong completion sampled from the policy.",
    )
    policy_samples: int = Field(
        default=4, ge=1, description='Samples per prompt searched for a wrong one (rejected_source="policy").'
    )
    max_length: int | None = Field(
        default=None, description="TRL's truncation length; None keeps full sequences."
    )
    eval_file: Path | None = Field(
        default=None,
        description="JSONL scored greedily before and after training (eval_accuracy in metrics.json).",
    )
    eval_samples: int = Field(default=200, ge=1, description="How many samples of eval_file are scored.")


def perturb_answer(answer: str, rng: random.Random) -> str:
    """A wrong answer close to the reference: a number moved by 1-10, or text with two characters swapped."""
    number = normalize_number(answer)
    if number is not None and "." not in number:
        offset = rng.choice([d for d in range(-10, 11) if d != 0])
        return str(int(number) + offset)
    if len(answer) >= 2:
        chars = list(answer)
        for _ in range(10):
            i, j = rng.sample(range(len(chars)), 2)
            if chars[i] != chars[j]:
                chars[i], chars[j] = chars[j], chars[i]
                return "".join(chars)
    return answer + "?"


def policy_rejections(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    samples: list[Sample],
    benchmark_name: str,
    per_prompt: int,
    prompt_format: str = "plain",
) -> list[str | None]:
    """For each sample, one sampled completion the benchmark scores as wrong (cut at its stop strings for
    `prompt_format`), or None."""
    benchmark = get_benchmark(benchmark_name)
    stop = stop_strings(benchmark, prompt_format)
    out: list[str | None] = []
    chunk = 64
    for start in range(0, len(samples), chunk):
        part = samples[start : start + chunk]
        prompts = [s.prompt for s in part for _ in range(per_prompt)]
        rollout = op.sample(model, tokenizer, prompts, max_new_tokens=int(benchmark.max_new_tokens))
        for i, s in enumerate(part):
            wrong = None
            for text in rollout.texts[i * per_prompt : (i + 1) * per_prompt]:
                cut = cut_at_stop(text, stop)
                if cut.strip() and benchmark.score(cut, s) == 0.0:
                    wrong = cut
                    break
            out.append(wrong)
    return out


def preference_rows(
    samples: list[Sample], rejected: list[str | None], seed: int, bos_prefix: str
) -> list[dict[str, str]]:
    rng = random.Random(seed)
    rows = []
    for s, bad in zip(samples, rejected, strict=True):
        rows.append(
            {
                "prompt": bos_prefix + s.prompt,
                "chosen": s.answer,
                "rejected": bad or perturb_answer(s.answer, rng),
            }
        )
    return rows


def _bos_prefix(tokenizer: PreTrainedTokenizerBase) -> str:
    """TRL tokenizes without special tokens; keep the BOS the model was trained with, if its tokenizer adds one."""
    ids = tokenizer("x")["input_ids"]
    bos = tokenizer.bos_token_id
    return str(tokenizer.bos_token) if bos is not None and ids and ids[0] == bos else ""


def run(config: DPOConfig) -> TrainResult:
    """Build preference pairs, train with TRL's DPOTrainer, save the (merged) checkpoint and metrics.json."""
    from datasets import Dataset
    from trl import DPOConfig as TRLDPOConfig
    from trl import DPOTrainer

    runtime.use_threads(config.torch_threads)
    op.seed_everything(config.seed)
    samples = op.load_samples(config.train_file, config.max_train_samples, op.chat_prompts(config))
    model, tokenizer = runtime.load_model_and_tokenizer(Path(config.model_path))
    staging = prepare_output_dir(config.output_dir)
    if config.rejected_source == "policy":
        rejected = policy_rejections(
            model, tokenizer, samples, config.benchmark, config.policy_samples, config.prompt_format
        )
    else:
        rejected = [None] * len(samples)
    rows = preference_rows(samples, rejected, config.seed, _bos_prefix(tokenizer))
    from_policy = sum(r is not None for r in rejected)
    runtime.log(
        f"dpo: {len(rows)} pairs ({from_policy} rejected answers sampled from the policy), {config.max_steps} steps"
    )
    eval_before = op.evaluate_on(model, tokenizer, config.eval_file, config.eval_samples, config.benchmark)
    args = TRLDPOConfig(
        **runtime.base_training_args(config, staging),
        beta=config.beta,
        loss_type=[config.loss_type],
        max_length=config.max_length,
    )
    run = runtime.train_trl(
        DPOTrainer,
        config,
        model=model,
        args=args,
        train_dataset=Dataset.from_list(rows),
        processing_class=tokenizer,
    )
    run.trainer.model, _ = plain_model(run.trainer.model)  # evaluate what is saved: LoRA merged
    margins = [float(e["rewards/margins"]) for e in run.trainer.state.log_history if "rewards/margins" in e]
    return finish_trl(
        run,
        "dpo",
        config,
        tokenizer,
        eval_before=eval_before,
        eval_after=op.evaluate_on(
            run.trainer.model, tokenizer, config.eval_file, config.eval_samples, config.benchmark
        ),
        extra={
            "pairs": float(len(rows)),
            "rejected_from_policy": float(from_policy),
            "reward_margin_first": margins[0] if margins else None,
            "reward_margin_last": margins[-1] if margins else None,
        },
    )


register_recipe(
    Recipe(
        name="dpo",
        description="Direct Preference Optimization (TRL DPOTrainer): reference answer over a wrong one.",
        config_class=DPOConfig,
        run=run,
    )
)
