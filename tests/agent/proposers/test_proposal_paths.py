"""A proposal may name only files its trial sees (/workspace, its own /trial and /output, and for model fields
/model and /base), and may not set the fields the loop owns.

Every path field of every registered recipe is tried with the host path of the hidden test set, a relative path
that climbs out of /workspace, and a path under /workspace that climbs out again; each must be refused with a
message naming the field, before anything of the trial is written. The same proposal through the LLM proposer goes
back to the model as a rejection.
"""

from __future__ import annotations

import json
import typing
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import BaseModel, Field

from agent.core.records import Proposal, ProposalContext, TrialRecord
from agent.llm import LLMClient, LLMSettings, PriceTable, RetryPolicy
from agent.loop.context import RunContext
from agent.loop.graph import LoopState
from agent.loop.limits import TrialLimits
from agent.loop.nodes import Research
from agent.loop.startup import make_budget
from agent.loop.trials import ProposalRefusedError, TrialSetupError, prepare_trial, recipe_config
from agent.proposers.llm import LLMProposer
from agent.proposers.proposal_paths import LOOP_OWNED_FIELDS, path_fields, proposal_problems
from agent.proposers.recipes import RecipeCatalog
from agent.run.config import RunConfig
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths
from grader.benchmarks import get_benchmark
from sandbox.devices import plan_devices
from sandbox.registry import get_sandbox
from sandbox.view import FIXED
from tests.support.openai_server import ScriptedOpenAIServer, reply
from trainers.config import TrainerConfig
from trainers.model_fit import fit_for
from trainers.registry import list_recipes

RECIPE_PATH_FIELDS = [
    (recipe.name, field)
    for recipe in list_recipes()
    for field in path_fields(recipe.config_class)
    if field not in LOOP_OWNED_FIELDS
]
CONFIGS = {recipe.name: recipe.config_class for recipe in list_recipes()}


@pytest.fixture
def run(tmp_path: Path) -> RunPaths:
    """A run folder laid out as the loop lays it out: workspace data, a finished trial, a private grader folder."""
    paths = RunPaths(home=tmp_path / "home", run_id="r1")
    paths.data_dir.mkdir(parents=True)
    for split in ("train", "valid"):
        (paths.data_dir / f"{split}.jsonl").write_text('{"id": "1", "prompt": "1+1=", "answer": "2"}\n')
    (paths.trials_dir / "t00" / "output").mkdir(parents=True)
    paths.grader_dir.mkdir(parents=True)
    (paths.grader_dir / "test.jsonl").write_text('{"id": "h", "prompt": "hidden", "answer": "42"}\n')
    return paths


@pytest.fixture
def base_model(tmp_path: Path) -> Path:
    model = tmp_path / "home" / "models" / "tiny-arith"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    return model


def _value(recipe: str, field: str, path: str) -> Any:
    """`path` in the shape the field takes (a list for list[Path])."""
    annotation = CONFIGS[recipe].model_fields[field].annotation
    members = [annotation, *typing.get_args(annotation)]
    return [path] if any(typing.get_origin(m) is list for m in members) else path


def _bad_values(run: RunPaths) -> dict[str, str]:
    """The three ways out of what a trial sees, aimed at the hidden test set."""
    return {
        "absolute": str(run.grader_dir / "test.jsonl"),
        "relative": "../grader/test.jsonl",
        "climbing": "/workspace/data/../../etc/passwd",
    }


def _prepare(proposal: Proposal, run: RunPaths, base_model: Path, trial_id: str = "t01") -> list[str]:
    return prepare_trial(
        proposal,
        trial_id=trial_id,
        paths=run,
        base_model=base_model,
        trials=[],
        benchmark="arith",
        python="python",
        maps=True,
    ).command


def test_every_known_path_field_is_found() -> None:
    found = set(RECIPE_PATH_FIELDS)
    expected = {
        ("gad", "teacher_file"),
        ("gad", "discriminator_path"),
        ("gad", "eval_file"),
        ("dpo", "eval_file"),
        ("opcd", "context_file"),
        ("opcd", "teacher_path"),
        ("opo", "eval_file"),
    }
    assert expected <= found, expected - found
    for recipe in list_recipes():  # the loop-owned paths are found too (and closed)
        assert {"model_path", "train_file", "output_dir"} <= set(path_fields(recipe.config_class))


@pytest.mark.parametrize("how", ["absolute", "relative", "climbing"])
@pytest.mark.parametrize(("recipe", "field"), RECIPE_PATH_FIELDS)
def test_a_path_out_of_the_workspace_is_refused(
    run: RunPaths, base_model: Path, recipe: str, field: str, how: str
) -> None:
    value = _bad_values(run)[how]
    proposal = Proposal(hypothesis="h", recipe=recipe, hyperparameters={field: _value(recipe, field, value)})
    with pytest.raises(ProposalRefusedError) as caught:
        _prepare(proposal, run, base_model)
    message = str(caught.value)
    assert f"hyperparameters.{field}" in message and repr(value) in message
    assert "outside what the trial sees" in message and "/workspace" in message
    assert isinstance(caught.value, TrialSetupError)  # flows like any setup error in the runner
    assert not run.trial_dir("t01").exists()  # refused before anything of the trial is written


@pytest.mark.parametrize(("recipe", "field"), RECIPE_PATH_FIELDS)
def test_a_path_in_the_workspace_is_accepted(
    run: RunPaths, base_model: Path, recipe: str, field: str
) -> None:
    inside = "/model" if field.endswith("_path") else "data/valid.jsonl"
    value = _value(recipe, field, inside)
    proposal = Proposal(hypothesis="h", recipe=recipe, hyperparameters={field: value})
    command = _prepare(proposal, run, base_model)
    assert command[-1] == "/trial/config.json"  # as the trial sees its record: no host path in the command
    config = json.loads((run.trial_dir("t01") / "config.json").read_text())
    assert config[field] == value
    assert config["model_path"] == "/model" and config["output_dir"] == "/output"
    absolute = "/base" if field.endswith("_path") else "/workspace/data/valid.jsonl"
    again = Proposal(hypothesis="h", recipe=recipe, hyperparameters={field: _value(recipe, field, absolute)})
    _prepare(again, run, base_model, trial_id="t02")


@pytest.mark.parametrize(("recipe", "field"), RECIPE_PATH_FIELDS)
def test_only_model_fields_may_name_the_base_model(
    run: RunPaths, base_model: Path, recipe: str, field: str
) -> None:
    proposal = Proposal(
        hypothesis="h", recipe=recipe, hyperparameters={field: _value(recipe, field, "/base")}
    )
    if field.endswith("_path"):  # teacher_path, discriminator_path: a model folder, mounted read-only
        _prepare(proposal, run, base_model)
    else:
        with pytest.raises(ProposalRefusedError, match=f"hyperparameters.{field}="):
            _prepare(proposal, run, base_model)


@pytest.mark.parametrize("field", sorted(LOOP_OWNED_FIELDS))
@pytest.mark.parametrize("recipe", sorted(CONFIGS))
def test_loop_owned_fields_cannot_be_overridden(
    run: RunPaths, base_model: Path, recipe: str, field: str
) -> None:
    value = "arith" if field == "benchmark" else str(run.workspace / "data" / "valid.jsonl")
    proposal = Proposal(hypothesis="h", recipe=recipe, hyperparameters={field: value})
    with pytest.raises(ProposalRefusedError) as caught:
        _prepare(proposal, run, base_model)
    assert f"hyperparameters.{field}={value!r}: {field} is set by the loop" in str(caught.value)
    with pytest.raises(ProposalRefusedError):  # recipe_config on its own refuses too
        recipe_config(proposal, seen=FIXED, benchmark="arith")


def test_train_py_config_gets_the_same_rules(run: RunPaths, base_model: Path) -> None:
    code = "print('hi')\n"
    cases: list[tuple[dict[str, Any], str]] = [
        ({"output_dir": "/output"}, "output_dir"),
        ({"model_path": "/model"}, "model_path"),
        ({"teacher_file": str(run.grader_dir / "test.jsonl")}, "teacher_file"),
        ({"data": {"eval_files": ["data/valid.jsonl", "../grader/test.jsonl"]}}, "data.eval_files[1]"),
    ]
    for hyperparameters, field in cases:
        proposal = Proposal(hypothesis="h", recipe="sft", hyperparameters=hyperparameters, train_py=code)
        with pytest.raises(ProposalRefusedError) as caught:
            _prepare(proposal, run, base_model)
        assert f"hyperparameters.{field}=" in str(caught.value)
    fine = Proposal(
        hypothesis="h",
        recipe="sft",
        hyperparameters={"eval_file": "data/valid.jsonl", "lr": 1e-3},
        train_py=code,
    )
    _prepare(fine, run, base_model)
    config = json.loads((run.trial_dir("t01") / "config.json").read_text())
    assert config == {
        "eval_file": "data/valid.jsonl",
        "lr": 1e-3,
        "model_path": "/model",
        "output_dir": "/output",
    }


class _Teacher(BaseModel):
    weights: Path
    notes: str = ""


class _LooseConfig(TrainerConfig):
    """A recipe that types its paths every which way."""

    teacher: _Teacher | None = None
    eval_files: list[Path] = Field(default_factory=list)
    named: dict[str, Path] = Field(default_factory=dict)
    weights_dir: str | None = None  # a str, caught by its name
    prompt: str = ""


@pytest.mark.parametrize(
    ("hyperparameters", "where"),
    [
        ({"teacher": {"weights": "/etc"}}, "hyperparameters.teacher.weights='/etc'"),
        ({"eval_files": ["data/valid.jsonl", "/etc/passwd"]}, "hyperparameters.eval_files[1]='/etc/passwd'"),
        ({"named": {"a": "../../x"}}, "hyperparameters.named.a='../../x'"),
        ({"weights_dir": "/tmp"}, "hyperparameters.weights_dir='/tmp'"),
        ({"extra": {"hint_file": "/etc/hosts"}}, "hyperparameters.extra.hint_file='/etc/hosts'"),
    ],
)
def test_paths_are_found_by_type_nesting_and_name(
    run: RunPaths, hyperparameters: dict[str, Any], where: str
) -> None:
    assert set(path_fields(_LooseConfig)) >= {"teacher", "eval_files", "named", "weights_dir"}
    assert "prompt" not in path_fields(_LooseConfig)
    problems = proposal_problems(hyperparameters, config_class=_LooseConfig)
    assert len(problems) == 1 and problems[0].startswith(where), problems
    fine = {"teacher": {"weights": "/trial/notes", "notes": "/not/a/path"}, "prompt": "/also/not"}
    assert proposal_problems(fine, config_class=_LooseConfig) == []


def test_a_refused_proposal_fails_its_trial_in_the_run_log(run: RunPaths, base_model: Path) -> None:
    """The built-in (or a human-edited) proposal reaches run_trial, which records the refusal and trains nothing."""
    config = RunConfig(home=run.home, sandbox="local")
    reporter = Reporter(run.log_file, quiet=True)
    from agent.proposers.builtin import BuiltinProposer

    context = RunContext(
        config=config,
        paths=run,
        reporter=reporter,
        proposer=BuiltinProposer(),
        sandbox=get_sandbox("local"),
        budget=make_budget(config, run.budget_ledger),
        devices=plan_devices(config.trial_gpus),
        base_model=base_model,
        benchmark=get_benchmark(config.benchmark),
        limits=TrialLimits.of_run(config),
        fit=fit_for(base_model),
    )
    research = Research(context)
    teacher = str(run.grader_dir / "test.jsonl")
    record = TrialRecord(
        trial_id="t01",
        index=1,
        proposal=Proposal(hypothesis="h", recipe="gad", hyperparameters={"teacher_file": teacher}),
    )
    failed = research.run_trial(LoopState(current=record))["current"]
    assert failed.status == "failed"
    assert f"hyperparameters.teacher_file={teacher!r} lies outside" in (failed.error or "")
    assert "hyperparameters.teacher_file=" in run.log_file.read_text()
    assert not run.trial_dir("t01").exists()


MODEL = "test-model"


@pytest.fixture
def server() -> Iterator[ScriptedOpenAIServer]:
    with ScriptedOpenAIServer(models=[MODEL]) as srv:
        yield srv


def test_the_llm_sees_the_refusal_and_can_fix_it(
    server: ScriptedOpenAIServer, run: RunPaths, base_model: Path
) -> None:
    def answer(teacher_file: str) -> dict[str, Any]:
        return {
            "hypothesis": "distil the teacher's answers",
            "recipe": "gad",
            "hyperparameters": {"teacher_file": teacher_file},
        }

    server.enqueue(reply(answer("../grader/test.jsonl")), reply(answer("data/valid.jsonl")))
    settings = LLMSettings(
        model=MODEL,
        base_url=server.base_url,
        timeout_s=10.0,
        retry=RetryPolicy(max_attempts=2, initial_backoff_s=0.01, max_backoff_s=0.05, max_total_s=10),
    )
    proposer = LLMProposer(
        LLMClient(settings, seed=0, prices=PriceTable()),
        MODEL,
        catalog=RecipeCatalog({"gad": CONFIGS["gad"]}),
    )
    context = ProposalContext(
        run_id="r1",
        benchmark="arith",
        benchmark_description="sums",
        base_model="tiny-arith",
        baseline_score=0.1,
        best_score=None,
        best_trial_id=None,
        trials=[],
        trials_left=2,
        seconds_left=600.0,
        recipes=["gad"],
        workspace=str(run.workspace),
        base_model_path=str(base_model),
    )
    proposal = proposer.propose(context)
    assert proposal.hyperparameters == {"teacher_file": "data/valid.jsonl"}
    feedback = server.chat_requests()[1].text()
    assert (
        "hyperparameters.teacher_file='../grader/test.jsonl' resolves to /grader/test.jsonl, outside"
        in feedback
    )
