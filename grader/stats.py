"""Error bars for scores: a seeded percentile bootstrap over per-sample scores."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel


class ScoreSummary(BaseModel):
    """A mean score with its sample count and 95% bootstrap confidence interval."""

    score: float
    n: int
    ci_low: float
    ci_high: float


def bootstrap_ci(
    scores: Sequence[float], *, resamples: int = 1000, seed: int = 0, level: float = 0.95
) -> tuple[float, float]:
    """Percentile bootstrap interval for the mean; deterministic for a given seed, (x, x) for a single sample."""
    values = np.asarray(scores, dtype=np.float64)
    if values.size == 0:
        raise ValueError("cannot compute a confidence interval of no scores; evaluate at least one sample")
    if values.size == 1:
        return float(values[0]), float(values[0])
    rng = np.random.default_rng(seed)
    means = np.empty(resamples, dtype=np.float64)
    chunk = max(1, 4_000_000 // values.size)  # bound memory: resample in chunks of indices
    for start in range(0, resamples, chunk):
        stop = min(resamples, start + chunk)
        idx = rng.integers(0, values.size, size=(stop - start, values.size))
        means[start:stop] = values[idx].mean(axis=1)
    alpha = (1.0 - level) / 2.0
    low, high = np.quantile(means, [alpha, 1.0 - alpha])
    mean = float(values.mean())
    return min(float(low), mean), max(float(high), mean)


def summarize(scores: Sequence[float], *, resamples: int = 1000, seed: int = 0) -> ScoreSummary:
    """Mean, n and bootstrap CI of per-sample scores."""
    low, high = bootstrap_ci(scores, resamples=resamples, seed=seed)
    return ScoreSummary(score=float(np.mean(scores)), n=len(scores), ci_low=low, ci_high=high)
