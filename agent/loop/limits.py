"""A trial's limits as one value: how long its sandbox may run and what it may use. Built once from the run's config
where the loop starts (`agent.loop.context.build_context`), then narrowed for each trial (`RunResources.trial_limits`:
the time the run has left, the GPUs leased to it, the seconds it keeps back for the host's work after it)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from agent.run import RunConfig


@dataclass(frozen=True)
class TrialLimits:
    """What one trial's sandbox gets (`agent.loop.trials.sandbox_request`) and what its recipe keeps back."""

    timeout_s: float  # wall seconds of its sandbox
    memory_mb: int
    cpus: float | None = None  # None: no CPU limit of its own
    gpus: tuple[int, ...] = ()  # machine-wide ids leased to it (`sandbox.devices.DevicePlan.for_trial`)
    # of a time-boxed trial's max_seconds, kept back for the host's validation of its checkpoint and its trainer's
    # exit (the trial's wall seconds count both)
    reserved_s: float = 0.0

    @classmethod
    def of_run(cls, config: RunConfig) -> TrialLimits:
        """The run's limits for every trial (`--trial-timeout`, `--trial-memory-mb`, `--trial-cpus`)."""
        return cls(timeout_s=config.trial_timeout, memory_mb=config.trial_memory_mb, cpus=config.trial_cpus)
