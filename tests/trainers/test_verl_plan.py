"""trainers.verl.plan: staged commands with explicit placeholders and a prerequisites checklist per family."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from trainers.verl.cli import app
from trainers.verl.plan import STAGES, Family, plan


@pytest.mark.parametrize("family", list(STAGES))
def test_every_family_plans_all_its_stages(family: Family) -> None:
    result = plan(family, nodes=2, gpus_per_node=8)
    assert [s.name for s in result.stages] == STAGES[family]
    items = {p.item for p in result.prerequisites}
    assert {"GPUs", "Ray", "vLLM", "Docker image", "W&B"} <= items
    assert "2 node(s) x 8" in next(p.detail for p in result.prerequisites if p.item == "GPUs")
    for placeholder in result.placeholders:
        assert placeholder.startswith("<") and placeholder.endswith(">")
    verl_stages = [s for s in result.stages if "verl.trainer" in s.command]
    assert verl_stages, "every family has at least one verl command"
    for s in verl_stages:
        assert "trainer.nnodes=2" in s.overrides or "--nnodes=2" in s.command
    for s in result.stages:  # Hydra refuses a key given twice on one command line
        for part in s.command.split(" && "):
            keys = [o.split("=", 1)[0] for o in s.overrides if o in part]
            assert len(keys) == len(set(keys)), (s.name, keys)
    text = result.render()
    assert "## Prerequisites" in text and all(s.command in text for s in result.stages)


def test_opo_is_exactly_on_policy() -> None:
    overrides = plan("opo", train_batch_size=128).stages[0].overrides
    assert "algorithm.adv_estimator=opo" in overrides
    assert "actor_rollout_ref.actor.ppo_mini_batch_size=128" in overrides
    assert "actor_rollout_ref.actor.ppo_epochs=1" in overrides
    assert "data.train_files=<DATA_ROOT>/train.parquet" in overrides
    command = plan("opo").stages[0].command
    assert (
        command.startswith("python -m verl.trainer.main_ppo")
        and "'trainer.logger=[console,wandb]'" in command
    )


def test_credentials_follow_the_stage_needs() -> None:
    coach = {p.item for p in plan("coach").prerequisites}
    assert "OpenAI-compatible coach" in coach
    grpo = plan("grpo", model="Qwen/Qwen2.5-0.5B-Instruct", loggers=("console",))
    items = {p.item for p in grpo.prerequisites}
    assert "Hugging Face" in items and "W&B" not in items and "OpenAI-compatible coach" not in items
    assert "Hugging Face" not in {p.item for p in plan("grpo", model="<MODEL_ROOT>/m").prerequisites}


def test_single_stage_and_bad_shapes() -> None:
    only = plan("gad", stage="adversarial")
    assert [s.name for s in only.stages] == ["adversarial"]
    assert "reward.reward_model.enable=True" in only.stages[0].overrides
    with pytest.raises(ValueError, match="no stage 'x'"):
        plan("gad", stage="x")
    with pytest.raises(ValueError, match="unknown family"):
        plan("ppo")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="must divide"):
        plan("grpo", gpus_per_node=8, tensor_parallel=3)


def test_plan_cli() -> None:
    runner = CliRunner()
    out = runner.invoke(app, ["plan", "--family", "oel", "--nodes", "2", "--json"])
    assert out.exit_code == 0, out.output
    data = json.loads(out.output)
    assert data["family"] == "oel" and [s["name"] for s in data["stages"]] == STAGES["oel"]
    assert "<CKPT_ROOT>" in data["placeholders"]
    text = runner.invoke(app, ["plan", "--family", "grpo"])
    assert text.exit_code == 0 and "python -m verl.trainer.main_ppo" in text.output
    bad = runner.invoke(app, ["plan", "--family", "nope"])
    assert bad.exit_code == 2 and "unknown family" in bad.output
