"""Recipe defaults that fit the base model: a model rlloop built (or any this small) keeps the recipes' own exactly;
a pretrained one gets rates a twentieth, small batches and every core, each a value its recipe's config accepts;
proposals carry them (and why), and the proposers draft at the model's rate."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

from agent.core.records import Proposal, ProposalContext
from agent.loop.trials import with_model_defaults
from agent.proposers.builtin import DEFAULT_LR, BuiltinProposer, default_rates, trial_budget
from agent.proposers.fixed import FixedProposer
from agent.proposers.tree import TreeProposer
from trainers.model_fit import (
    BUILT_HERE_FILE,
    PRETRAINED_TRIAL_SECONDS,
    SMALL_PARAMETERS,
    ModelFit,
    count_parameters,
    fit_for,
)
from trainers.registry import get_recipe, list_recipes


@pytest.fixture(scope="module")
def pretrained(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder whose weights count 25M parameters (int8, 25 MB): what the fit reads of a model is its headers."""
    folder = tmp_path_factory.mktemp("pretrained")
    save_file(
        {"model.embed_tokens.weight": torch.zeros((5000, 5000), dtype=torch.int8)},
        folder / "model.safetensors",
    )
    return folder


def test_parameters_are_counted_from_the_headers(pretrained: Path, tmp_path: Path) -> None:
    assert count_parameters(pretrained) == 25_000_000
    assert count_parameters(tmp_path) is None


def test_a_model_built_here_or_a_small_one_keeps_every_recipe_default(
    pretrained: Path, tmp_path: Path
) -> None:
    built = tmp_path / "built"
    built.mkdir()
    for name in ("model.safetensors", BUILT_HERE_FILE):
        (built / name).write_bytes(
            (pretrained / "model.safetensors").read_bytes() if name.endswith("s") else b"{}"
        )
    small = tmp_path / "small"
    small.mkdir()
    save_file({"w": torch.zeros((100, 100))}, small / "model.safetensors")
    for folder, kind in ((built, "built here"), (small, "small")):
        fit = fit_for(folder)
        assert fit.kind == kind and not fit.pretrained and fit.max_trial_seconds is None
        assert all(fit.defaults(r.name) == {} for r in list_recipes())
    assert "the recipes' own defaults" in fit_for(small).summary(["sft"])


def test_a_pretrained_model_gets_rates_batches_and_threads_that_fit_it(pretrained: Path) -> None:
    fit = fit_for(pretrained)
    assert fit.kind == "pretrained" and fit.parameters == 25_000_000 > SMALL_PARAMETERS
    assert fit.max_trial_seconds == PRETRAINED_TRIAL_SECONDS
    assert fit.defaults("sft") == {
        "learning_rate": 5e-05,
        "per_device_train_batch_size": 8,
        "max_length": 512,
        "torch_threads": None,
    }
    assert fit.defaults("dpo")["learning_rate"] == 2.5e-06
    grpo = fit.defaults("grpo")
    assert grpo["learning_rate"] == 1e-05 and grpo["num_generations"] == 4
    assert grpo["per_device_train_batch_size"] == 16 and grpo["torch_threads"] is None
    assert fit.defaults("rft")["prompts_per_round"] == 16
    assert "sft learning_rate=5e-05, per_device_train_batch_size=8" in fit.summary(["sft"])


def test_every_recipe_accepts_the_pretrained_defaults(pretrained: Path, tmp_path: Path) -> None:
    fit = fit_for(pretrained)
    for recipe in list_recipes():
        paths = {"model_path": tmp_path, "train_file": tmp_path / "t.jsonl", "output_dir": tmp_path / "o"}
        config = get_recipe(recipe.name).config_class.model_validate({**paths, **fit.defaults(recipe.name)})
        for field, value in fit.defaults(recipe.name).items():
            assert getattr(config, field) == value, (recipe.name, field)


def _context(fit: ModelFit) -> ProposalContext:
    return ProposalContext(
        run_id="r",
        benchmark="arith",
        benchmark_description="d",
        base_model="m",
        baseline_score=0.0,
        best_score=None,
        best_trial_id=None,
        trials=[],
        trials_left=4,
        seconds_left=1200.0,
        recipes=["sft", "grpo"],
        recipe_defaults={r: fit.defaults(r) for r in ("sft", "grpo")},
        max_trial_seconds=fit.max_trial_seconds,
    )


def test_the_proposers_draft_at_the_models_rate_and_length(pretrained: Path) -> None:
    context = _context(fit_for(pretrained))
    assert default_rates(context)["sft"] == 5e-05 and default_rates(None) == DEFAULT_LR
    for proposer in (TreeProposer(), BuiltinProposer(), FixedProposer()):
        proposal = proposer.propose(context)
        assert proposal.recipe == "sft" and proposal.hyperparameters["learning_rate"] == 5e-05, proposer.name
    seconds, _ = trial_budget(context, None)
    assert seconds == PRETRAINED_TRIAL_SECONDS  # 1200 s for 4 trials: 290 s each, capped at the model's 240
    assert trial_budget(context.model_copy(update={"max_trial_seconds": None}), None)[0] == 90.0


def test_a_proposal_carries_the_defaults_it_left_unset_and_why(pretrained: Path) -> None:
    fit = fit_for(pretrained)
    proposal = Proposal(
        hypothesis="h", recipe="sft", hyperparameters={"learning_rate": 1e-4, "max_length": 300}
    )
    filled = with_model_defaults(proposal, fit)
    hp = filled.hyperparameters
    assert hp["learning_rate"] == 1e-4 and hp["max_length"] == 300  # what the proposer chose stands
    assert hp["per_device_train_batch_size"] == 8 and hp["torch_threads"] is None
    assert (
        "per_device_train_batch_size, torch_threads: a pretrained model of 25.0M parameters"
        in hp["extra"]["model_fit"]
    )
    small = ModelFit("small", 1000, "small")
    assert with_model_defaults(proposal, small) is proposal
    code = Proposal(hypothesis="h", recipe="sft", train_py="print(1)")
    assert with_model_defaults(code, fit) is code
