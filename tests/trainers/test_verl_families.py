"""The family registry: each built-in builder plans the stages it declares, and a new family is one function plus
one registration, selectable by name from `plan` and `rlloop plan`."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
from typer.testing import CliRunner

from trainers.verl.builders import MAIN_PPO, FamilyPlan, PlanContext, exact_on_policy, family, verl_stage
from trainers.verl.cli import app
from trainers.verl.plan import FAMILIES, STAGES, family_names, plan


def test_builtin_builders_plan_the_stages_they_declare() -> None:
    assert family_names()[: len(STAGES)] == list(STAGES)
    for name in STAGES:
        builder = FAMILIES.get(name)
        assert builder.name == name and list(builder.stages) == STAGES[name]
        assert [s.name for s in plan(name).stages] == STAGES[name]
        assert FAMILIES.origin(name) == "trainers.verl.families"


@pytest.fixture
def toy_family() -> Iterator[str]:
    @family("toy", "train")
    def toy(ctx: PlanContext) -> FamilyPlan:
        overrides = ["algorithm.adv_estimator=toy", *ctx.common(), *exact_on_policy(ctx.train_batch_size)]
        return FamilyPlan([verl_stage("train", "a plugin family", MAIN_PPO, overrides)], notes=["toy"])

    yield "toy"
    FAMILIES.unregister("toy")


def test_a_registered_family_plans_by_name(toy_family: str) -> None:
    assert toy_family in family_names()
    result = plan(toy_family, nodes=2)
    assert result.family == "toy" and [s.name for s in result.stages] == ["train"]
    assert "trainer.nnodes=2" in result.stages[0].overrides and result.notes == ["toy"]
    assert result.prerequisites[-1].item == "verl extensions"
    with pytest.raises(ValueError, match="no stage 'distill'"):
        plan(toy_family, stage="distill")
    out = CliRunner().invoke(app, ["plan", "--family", "toy", "--json"])
    assert out.exit_code == 0, out.output
    assert json.loads(out.output)["stages"][0]["overrides"][0] == "algorithm.adv_estimator=toy"


def test_unknown_family_lists_the_registered_ones(toy_family: str) -> None:
    with pytest.raises(ValueError, match="unknown family 'nope'; choose one of grpo, .*, coach, toy"):
        plan("nope")
