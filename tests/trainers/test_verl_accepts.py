"""Issue 12 point 6: every stage `rlloop plan` prints is accepted by verl 0.9.1's own start-up checks, without a GPU.

For every family x track x stage (with no role flag on one node, with every role flag on two, and the plan fixtures'
variants that change shapes), each verl call of the stage, its placeholders filled as a user would, goes through what
its entry point runs before it allocates a GPU (tests/trainers/verl_validate.py: Hydra's compose of the entry
point's config with the overrides, `validate_config`, the dataclass configs, the advantage estimator, policy loss
and reward function lookups, the model merger's and torchrun's own argument parsers). A plan verl refuses fails
here. On top: a later stage's model is a merged Hugging Face folder, never verl's FSDP shards; greedy generation
asks for one sample; multi-node torchrun has a rendezvous; no `+rlloop.*` key is left. The checks themselves are
shown to refuse what verl refuses (a missing micro-batch size, two greedy samples, an unknown key).
"""

from __future__ import annotations

from typing import Any

import pytest

from tests.trainers import verl_validate
from tests.trainers.verl_plan_grid import VARIANTS
from trainers.verl.builders import GENERATION, MAIN_PPO, MERGER, SFT
from trainers.verl.plan import FAMILY_TRACKS, STAGES, plan

ROLES: dict[str, Any] = {
    "model": "Qwen/Qwen3-8B",
    "reference": "<MODEL_ROOT>/teacher",
    "coach": "gpt-4o",
    "reward_model": "<MODEL_ROOT>/discriminator",
    "checkpoint_step": "100-300:100",
    "experiment": "e12",
}
# the fixtures' variants that change what verl checks (batch shapes, every knob, the logger list); the others
# only rename the model, which the two cases per track already cover
SHAPES = ("batch_128", "every_knob", "hub_model_console", "relative_model")
NOT_WRITTEN = {
    "coach_reward.py"
}  # reward files a plan names that rlloop has not written (the coach's rubric)


@pytest.fixture(scope="module", autouse=True)
def verl() -> Any:
    reason = verl_validate.missing_reason()
    if reason:
        if verl_validate.REQUIRED:
            pytest.fail(reason)
        pytest.skip(reason)
    return verl_validate.load()


def cases() -> list[tuple[str, dict[str, Any]]]:
    found = []
    for family in STAGES:
        for track in [None, *FAMILY_TRACKS[family]]:
            tracked: dict[str, Any] = {} if track is None else {"track": track}
            if track == "system-prompt":
                tracked |= {"prompt_type": "safety"}
            found.append((f"{family}/{track}", {"family": family, **tracked}))
            found.append(
                (f"{family}/{track}/roles/2-nodes", {"family": family, **tracked, **ROLES, "nodes": 2})
            )
        for name in SHAPES:
            found.append((f"{family}/variant={name}", {"family": family, **VARIANTS[name]}))
    return found


CASES = cases()


def planned(kwargs: dict[str, Any]) -> Any:
    call: dict[str, Any] = {k: tuple(v) if k == "loggers" else v for k, v in kwargs.items()}
    return plan(**call, env={})


@pytest.mark.parametrize("kwargs", [c for _, c in CASES], ids=[n for n, _ in CASES])
def test_verl_accepts_every_stage(kwargs: dict[str, Any]) -> None:
    result = planned(kwargs)
    for stage in result.stages:
        assert "+rlloop." not in stage.command, stage.name  # nothing in verl reads them
        checked = verl_validate.check_command(stage.command)
        called = {
            m for m in (MAIN_PPO, GENERATION, SFT, MERGER, "verl.trainer.main_eval") if m in stage.command
        }
        assert {what for what, _ in checked} >= called, (stage.name, called)  # every verl call was checked
        merged: list[str] = []
        for what, config in checked:
            if what == MERGER:
                assert config.operation == "merge" and config.backend == "fsdp"
                merged.append(config.target_dir)
            elif what == "torchrun":
                assert config.nnodes == str(result.nodes) and config.nproc_per_node == str(
                    result.gpus_per_node
                )
                if result.nodes > 1:
                    assert config.rdzv_backend == "c10d" and config.rdzv_endpoint == "10.0.0.1:29500"
                    assert config.node_rank == 0
            else:
                model = config.model.path if what == SFT else _policy(config)
                if model and model.startswith("/ckpt/"):  # a checkpoint this plan wrote
                    assert model.endswith("/huggingface"), (stage.name, model)  # merged, not FSDP shards
                    assert model in merged or _merged_by_an_earlier_stage(result, stage.name, model), model
                if what == GENERATION and config.actor_rollout_ref.rollout.temperature == 0:
                    assert config.actor_rollout_ref.rollout.n == 1
                if what == MAIN_PPO:
                    micro = config.actor_rollout_ref.actor.ppo_micro_batch_size_per_gpu
                    per_gpu = (
                        config.actor_rollout_ref.actor.ppo_mini_batch_size
                        * config.actor_rollout_ref.rollout.n
                    )
                    per_gpu //= result.nodes * result.gpus_per_node
                    assert per_gpu > 0 and per_gpu % micro == 0  # verl's workers' normalised mini-batch check
    assert not verl_validate.MISSING_EXTENSION_FILES - NOT_WRITTEN


def _policy(config: Any) -> str | None:
    return config.actor_rollout_ref.model.path if "actor_rollout_ref" in config else None


def _merged_by_an_earlier_stage(result: Any, name: str, model: str) -> bool:
    """OEL's evaluation reads the folder its round's consolidation stage merged."""
    names = [s.name for s in result.stages]
    earlier = result.stages[: names.index(name)]
    return any(f"--target_dir {model}" in verl_validate.filled(s.command) for s in earlier)


def test_the_coach_reward_is_the_one_file_not_written() -> None:
    (stage,) = plan("coach", stage="train-rl", env={}).stages
    verl_validate.check_command(stage.command)
    assert "coach_reward.py" in verl_validate.MISSING_EXTENSION_FILES
    assert "<VERL_EXT>" in plan("coach", env={}).placeholders


def test_the_checks_refuse_what_verl_refuses() -> None:
    (stage,) = plan("grpo", env={}).stages
    overrides = [verl_validate.filled(o) for o in stage.overrides]
    verl_validate.check_ppo(overrides)
    without = [o for o in overrides if "actor.ppo_micro_batch_size_per_gpu" not in o]
    with pytest.raises(Exception, match="ppo_micro_batch_size"):
        verl_validate.check_ppo(without)
    no_ref = [o for o in overrides if "ref.log_prob_micro_batch_size_per_gpu" not in o]
    with pytest.raises(ValueError, match="actor_rollout_ref.ref"):
        verl_validate.check_ppo(no_ref)  # GRPO's KL loss needs the reference
    with pytest.raises(Exception, match="rlloop"):
        verl_validate.check_ppo([*overrides, "rlloop.distill.top_k=3"])  # Hydra: no such key
    (generation,) = plan("gad", stage="generation", checkpoint_step="100", env={}).stages
    words = verl_validate.words_of(generation.command)[-1]
    greedy = words[words.index(GENERATION) + 1 :]
    verl_validate.check_generation(greedy)
    twice = [o.replace("rollout.n=1", "rollout.n=2") for o in greedy]
    with pytest.raises(AssertionError, match="temperature=0"):
        verl_validate.check_generation(twice)
    with pytest.raises(SystemExit):  # argparse: no such flag
        verl_validate.check_merger(["merge", "--backend", "fsdp", "--local-dir", "/ckpt/x"])


def test_a_batch_the_gpus_cannot_share_is_refused_by_the_planner_as_by_verl() -> None:
    with pytest.raises(ValueError, match=r"train_batch_size x rollout_n \(3 x 4 = 12\) divisible by the GPU"):
        plan("grpo", train_batch_size=3, rollout_n=4, gpus_per_node=8, env={})
    (stage,) = plan("grpo", train_batch_size=3, rollout_n=4, gpus_per_node=4, env={}).stages
    overrides = [verl_validate.filled(o) for o in stage.overrides]
    verl_validate.check_ppo(overrides)
    on_eight = [o.replace("trainer.n_gpus_per_node=4", "trainer.n_gpus_per_node=8") for o in overrides]
    with pytest.raises(
        AssertionError, match="real_train_batch_size"
    ):  # the same shape on 8 GPUs: verl says no
        verl_validate.check_ppo(on_eight)
