"""What one research run's nodes work with: built completely by `agent.run.startup.build_context` before the nodes
exist, never changed afterwards (`agent.loop.resources.RunResources` adds the live grader, MLflow client and clock)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.llm.budget import Budget
    from agent.proposers.base import Proposer
    from agent.run.config import RunConfig
    from agent.run.reporting import Reporter
    from agent.run.workspace import RunPaths
    from grader.benchmarks import Benchmark
    from sandbox.base import Sandbox
    from sandbox.devices import DevicePlan


@dataclass(frozen=True)
class RunContext:
    """One run's config, folders, log, proposer, sandbox, budget, devices, base model and benchmark."""

    config: RunConfig
    paths: RunPaths
    reporter: Reporter
    proposer: Proposer
    sandbox: Sandbox
    budget: Budget  # shared with the proposer; a resumed run goes on from what it spent
    devices: DevicePlan  # which GPUs the trials and the grader use (`sandbox.devices.plan_devices`)
    base_model: Path  # the base model's folder, resolved (built or fetched) before the run starts
    benchmark: Benchmark  # its public part: description, valid split, scoring
