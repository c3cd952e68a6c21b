"""Sweeps: every combination of benchmarks x base models x agents x seeds as resumable research runs, compared."""

from agent.sweeps.spec import Combination, SweepSpec

__all__ = ["Combination", "SweepSpec"]
