"""The live resources behind one research run's nodes: config, workspace, grader, sandbox, proposer, budget, MLflow.

They are rebuilt, never deserialised, when a run resumes: the graph's state holds only plain data, and the grader
comes back (with its whole store) the first time a node asks for it. What the driver built before the nodes exist is
the run's `agent.loop.context.RunContext`; `agent.loop.nodes.Research` adds the nodes.
"""

from __future__ import annotations

import os
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

from agent.core import Proposal, TrialRecord
from agent.loop import prewarm
from agent.loop.context import RunContext
from agent.loop.graph import LoopState
from agent.loop.limits import TrialLimits
from agent.loop.prewarm import WarmTrial
from agent.loop.trials import (
    PreparedTrial,
    SandboxScripts,
    allowed_recipes,
    prepare_trial,
    python_for,
    sandbox_request,
)
from agent.run import GraderProcess
from agent.tracking import Tracker
from sandbox import untrusted
from sandbox.base import SandboxRequest, maps_paths
from sandbox.registry import isolation_of


class RunResources:
    """One run's workspace, grader, sandbox, proposer, budget and MLflow client, and the clock of its time budget."""

    def __init__(self, context: RunContext) -> None:
        self.context = context  # built completely by the driver; nothing is set on this object from outside
        # the context's parts under their own names, for the nodes (the context is frozen: these are never rebound)
        self.config, self.paths, self.reporter = context.config, context.paths, context.reporter
        self.proposer, self.sandbox, self.budget = context.proposer, context.sandbox, context.budget
        self.devices, self.base_model, self.benchmark = context.devices, context.base_model, context.benchmark
        if context.devices.gpus or context.config.trial_gpus:
            context.reporter.info(context.devices.describe())
        self.tracker = Tracker(context.config.tracking_uri, context.config.home / "mlartifacts")
        self._grader: GraderProcess | None = None
        self._mark = time.monotonic()
        self.grader_start_s = 0.0  # wall seconds spent starting the grader (model load + baseline)
        # what validating a checkpoint, and a trainer's exit and the checkpoint's sealing, took last: a time-boxed
        # trial keeps both back of its max_seconds, so its wall seconds, validation included, fit them
        self.validation_estimate_s = 0.0
        self.exit_estimate_s = 0.0
        self.warm: WarmTrial | None = None  # the next trial's sandbox, started early (agent.loop.prewarm)

    @property
    def scripts(self) -> SandboxScripts:
        """What runs the proposer's scripts: in the run's sandbox, each as a trial of its own."""
        return SandboxScripts(self.paths, self.sandbox, self.base_model)

    @property
    def isolation(self) -> str:
        """How the run's trials are kept from the grader: "container", "namespaces" or "none"."""
        return isolation_of(self.sandbox)

    @property
    def submission_cap(self) -> int:
        return self.config.max_submissions or self.config.loop_n + 1

    # ---- the grader ---------------------------------------------------------------------------------------------
    @property
    def grader(self) -> GraderProcess:
        """The run's grading server, (re)started on demand: after a resume it comes back with its whole store."""
        if self._grader is None or not self.grader_alive():
            grader = GraderProcess.for_run(
                self.paths,
                self.config,
                base_model=self.base_model,
                isolation=self.isolation,
                max_submissions=self.submission_cap,
            )
            started = time.monotonic()
            with self.reporter.watching("starting the grading server and scoring the baseline"):
                grader.start(devices=self.devices)
            self.grader_start_s += time.monotonic() - started
            self._grader = grader
        return self._grader

    def grader_alive(self) -> bool:
        """Whether this process's grader is running (never starts one)."""
        return self._grader is not None and self._grader.proc is not None and self._grader.proc.poll() is None

    def final_results(self, status: str) -> dict[str, Any]:
        """The grader's final numbers; finalizing ends its run (private scores revealed, no more submissions), so an
        interrupted run, which stays open for resume, only counts its submissions."""
        if status != "interrupted":
            return self.grader.finalize()
        if not self.grader_alive():
            return {}
        live = self.grader.get("/scores")
        return {"total_submissions": sum(1 for s in live["submissions"] if s.get("duplicate_of") is None)}

    def earlier_submission(self, checkpoint: Path) -> dict[str, Any] | None:
        """The grader's finished, counted submission of this exact checkpoint folder, if there is one."""
        scores = self.grader.get("/scores")
        counted = [
            s
            for s in scores.get("submissions", [])
            if s.get("duplicate_of") is None and s.get("score") is not None
        ]
        for view in counted:
            if view.get("status") == "done" and os.path.normpath(
                view.get("model_path", "")
            ) == os.path.normpath(checkpoint):
                return {**view, "total_submissions": len(counted)}
        return None

    def secrets(self) -> tuple[str, ...]:
        """What no result shown to a proposer may carry: the running grader's token (a trial never sees it)."""
        token = self._grader.token if self._grader is not None else None
        return (token,) if token else ()

    def close(self) -> None:
        if self._grader is not None:
            self._grader.stop()

    # ---- trials -------------------------------------------------------------------------------------------------
    @property
    def prompting(self) -> dict[str, Any] | None:
        """The run's prompt format for trial configs (None when plain: trial configs stay as they were)."""
        if self.config.prompt_format != "chat":
            return None
        return {"prompt_format": "chat", "system_prompt": self.config.system_prompt}

    def trial_limits(self, timeout_s: float) -> TrialLimits:
        """The next trial's limits: the run's, with `timeout_s`, the GPUs free now, and kept back of a time-boxed
        trial's max_seconds what validating a checkpoint and a trainer's exit took last."""
        return replace(
            self.context.limits,
            timeout_s=timeout_s,
            gpus=tuple(self.devices.for_trial()),
            reserved_s=self.validation_estimate_s + self.exit_estimate_s,
        )

    def trial_request(
        self, proposal: Proposal, trial_id: str, trials: list[TrialRecord], limits: TrialLimits
    ) -> SandboxRequest:
        """The sandbox request that trains `proposal` in trials/<trial_id> (TrialSetupError if it cannot be set up)."""
        prepared = self._prepare(proposal, trial_id, trials, limits.reserved_s)
        return sandbox_request(prepared, trial_id=trial_id, paths=self.paths, limits=limits)

    def prepare_warm(
        self, warm: WarmTrial, proposal: Proposal, trials: list[TrialRecord], limits: TrialLimits
    ) -> PreparedTrial:
        """The trial's record and command for the warm sandbox that waits for it (TrialSetupError, WarmStartError)."""
        return self._prepare(proposal, warm.trial_id, trials, limits.reserved_s, warm_start=warm.start)

    def _prepare(
        self,
        proposal: Proposal,
        trial_id: str,
        trials: list[TrialRecord],
        reserved_s: float,
        warm_start: Path | None = None,
    ) -> PreparedTrial:
        """`agent.loop.trials.prepare_trial` in this run: its folders, base model, benchmark, sandbox, prompts."""
        return prepare_trial(
            proposal,
            trial_id=trial_id,
            paths=self.paths,
            base_model=self.base_model,
            trials=trials,
            benchmark=self.config.benchmark,
            python=python_for(self.sandbox),
            maps=maps_paths(self.sandbox),
            prompting=self.prompting,
            reserved_seconds=reserved_s,
            warm_start=warm_start,
        )

    def launch_warm(self, index: int) -> None:
        """Start trial `index`'s sandbox now, if the run will train it and warm trials work here."""
        config = self.config
        if self.warm is not None and self.warm.trial_id == f"t{index:02d}":
            return
        self.cancel_warm()
        gpus = len(self.devices.for_trial()) if config.trial_gpus else 0
        if not config.trial_prewarm or index > config.loop_n:
            return
        if not prewarm.supported(self.sandbox, gpus=gpus, concurrency=config.trial_concurrency):
            return
        try:
            self.warm = prewarm.launch(
                self.sandbox,
                trial_id=f"t{index:02d}",
                paths=self.paths,
                base_model=self.base_model,
                limits=self.context.limits,
                recipes=allowed_recipes(config.recipes),
            )
        except (OSError, untrusted.UntrustedPathError) as exc:  # the trial starts afresh when its turn comes
            self.reporter.warn(f"t{index:02d}: no warm sandbox ({exc})")

    def take_warm(self, trial_id: str) -> WarmTrial | None:
        """The warm sandbox started for `trial_id` (handed over: the caller owns it now), else None."""
        warm, self.warm = self.warm, None
        if warm is not None and warm.trial_id != trial_id:
            prewarm.cancel(warm, self.sandbox, forget=True)
            return None
        return warm

    def cancel_warm(self) -> None:
        """End the warm sandbox of a trial that will not come (the run ends, or another trial comes first)."""
        warm, self.warm = self.warm, None
        if warm is not None:
            prewarm.cancel(warm, self.sandbox, forget=True)

    # ---- the time budget ----------------------------------------------------------------------------------------
    def compute_left_s(self) -> float | None:
        """Trial wall seconds the run may still spend (`--max-compute-s`), or None without that cap."""
        limit = self.budget.limits.max_compute_s
        return None if limit is None else max(0.0, limit - self.budget.spent().compute_s)

    def used_s(self, state: LoopState) -> float:
        return state.used_s + (time.monotonic() - self._mark)

    def _spend(self, state: LoopState) -> float:
        used = self.used_s(state)
        self._mark = time.monotonic()
        return used
