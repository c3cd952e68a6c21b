"""The fixed recipe (the control a search must beat): the same recipe at its default hyperparameters from the base
model every time, only the seed changes; `--trial-seconds` time-boxes it like every built-in policy."""

from __future__ import annotations

from agent.core.records import ProposalContext
from agent.proposers.builtin import DEFAULT_LR
from agent.proposers.fixed import FixedProposer
from tests.agent.proposers.test_builtin import _ctx, _trial


def test_the_fixed_recipe_never_learns_from_earlier_trials() -> None:
    first = FixedProposer(max_steps=50).propose(_ctx([], None, None))
    good = _trial(1, 0.9)
    later = FixedProposer(max_steps=50).propose(_ctx([good], 0.9, "t01"))
    for proposal in (first, later):
        assert proposal.recipe == "sft" and proposal.parent is None and proposal.operator == "draft"
        assert proposal.hyperparameters["learning_rate"] == DEFAULT_LR["sft"]
        assert proposal.hyperparameters["max_steps"] == 50
    assert first.hyperparameters["seed"] != later.hyperparameters["seed"]


def test_trial_seconds_time_box_every_policy_alike() -> None:
    context: ProposalContext = _ctx([], None, None).model_copy(
        update={"recipes": ["grpo", "sft"], "trial_seconds": 12.5}
    )
    proposal = FixedProposer().propose(context)
    assert proposal.recipe == "grpo" and proposal.hyperparameters["learning_rate"] == DEFAULT_LR["grpo"]
    assert proposal.hyperparameters["max_seconds"] == 12.5 == proposal.estimated_cost_s
    # no step count: the trial's schedule follows its seconds (trainers.schedule), not steps it will never reach
    assert proposal.hyperparameters["max_steps"] is None
    assert "lr_scheduler_type" not in proposal.hyperparameters  # the recipe's own default: linear decay


def test_a_run_that_names_no_recipes_runs_sft_not_the_alphabets_first() -> None:
    """`rlloop run --proposer fixed` without `--recipes`: the registry's first name is `coach`, which needs an LLM
    endpoint and fails every trial; the default recipe is sft."""
    from agent.loop.trials import allowed_recipes

    recipes = allowed_recipes(None)
    assert recipes[0] == "sft" and "coach" in recipes
    proposal = FixedProposer().propose(_ctx([], None, None).model_copy(update={"recipes": recipes}))
    assert proposal.recipe == "sft"
    assert allowed_recipes("grpo,sft") == ["grpo", "sft"]  # a list the run gives keeps its order
