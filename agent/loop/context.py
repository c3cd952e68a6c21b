"""What one research run's nodes work with: built completely by `build_context` before the nodes exist, never changed
afterwards (`agent.loop.resources.RunResources` adds the live grader, MLflow client and clock). Here, in the loop, not
in agent/run: it makes the run's proposer, and the proposers stand above the run's modules."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from agent.loop.limits import TrialLimits
from agent.loop.startup import StartedRun, make_budget, write_recipe_catalog
from agent.loop.trials import allowed_recipes
from agent.proposers import make_proposer
from agent.run import check_base_model, first_use_note, open_sandbox, prepare_workspace, resolve_base_model
from grader.benchmarks import get_benchmark
from trainers.model_fit import ModelFit, fit_for

if TYPE_CHECKING:
    from agent.llm import Budget
    from agent.proposers import Proposer
    from agent.run import Reporter, RunConfig, RunPaths
    from grader.benchmarks import Benchmark
    from sandbox.base import Sandbox
    from sandbox.devices import DevicePlan


@dataclass(frozen=True)
class RunContext:
    """One run's config, folders, log, proposer, sandbox, budget, devices, base model, benchmark and trial limits."""

    config: RunConfig
    paths: RunPaths
    reporter: Reporter
    proposer: Proposer
    sandbox: Sandbox
    budget: Budget  # shared with the proposer; a resumed run goes on from what it spent
    devices: DevicePlan  # which GPUs the trials and the grader use (`sandbox.devices.plan_devices`)
    base_model: Path  # the base model's folder, resolved (built or fetched) before the run starts
    benchmark: Benchmark  # its public part: description, valid split, scoring
    limits: TrialLimits  # every trial's, from the config (each trial's own: `RunResources.trial_limits`)
    fit: ModelFit  # what the base model is, and the recipe defaults that fit it (`trainers.model_fit`)


def build_context(started: StartedRun, reporter: Reporter) -> RunContext:
    """Everything the research loop's nodes work with, built once: the base model (built or fetched on first use),
    the workspace's splits, the budget (a resumed run goes on from what it spent), the proposer and the sandbox."""
    config, paths = started.config, started.paths
    benchmark = get_benchmark(config.benchmark)
    base_model = resolve_base_model(
        config.base_model,
        config.home,
        on_build=lambda n: reporter.info(first_use_note(n)),
    )
    with reporter.watching(f"checking that every trial can load {base_model.name}"):
        check_base_model(base_model, prompt_format=config.prompt_format)  # before the baseline: refused here
    fit = fit_for(base_model)
    reporter.info(f"base model {config.base_model}: {fit.summary(allowed_recipes(config.recipes))}")
    with reporter.watching(f"writing the {config.benchmark} train/valid splits into the workspace"):
        prepare_workspace(paths, benchmark)  # generated games take a minute the first time
    budget = make_budget(config, paths.budget_ledger)
    proposer = make_proposer(config, budget)
    write_recipe_catalog(paths, reporter)
    sandbox = open_sandbox(config, reporter, require_isolation=False)
    # trials placed on other machines (ray): each machine must see the run's folder, else the run stops here
    if sandbox.places_on_nodes:
        with reporter.watching("checking that every node that may run trials sees the run's folder"):
            nodes = sandbox.check_shared_storage(paths.run_dir, paths.home)
        reporter.info(f"shared storage: {len(nodes)} trial node(s) see {paths.run_dir}")
    reporter.info(f"proposer: {proposer.name} | sandbox: {sandbox.name} | workspace: {paths.workspace}")
    return RunContext(
        config=config,
        paths=paths,
        reporter=reporter,
        proposer=proposer,
        sandbox=sandbox,
        budget=budget,
        devices=started.devices,
        base_model=base_model,
        benchmark=benchmark,
        limits=TrialLimits.of_run(config),
        fit=fit,
    )
