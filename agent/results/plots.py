"""Pictures of a run's results: the score over submissions (`score_over_submissions.png`), and how any figure is
written (a sweep's report draws with it too)."""

from __future__ import annotations

import io
from pathlib import Path
from typing import Any

from tasks.atomic import atomic_write_bytes


def plot_scores(path: Path, scores: list[float], baseline: float | None, title: str) -> Path | None:
    """Score over submissions, with the baseline and the best so far: the picture a reviewer wants."""
    if not scores:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6.4, 3.6), dpi=110)
    steps = list(range(1, len(scores) + 1))
    best = [max(scores[: i + 1]) for i in range(len(scores))]
    ax.plot(steps, scores, "o-", label="submission score")
    ax.step(steps, best, where="post", linestyle="--", label="best so far")
    if baseline is not None:
        ax.axhline(baseline, color="grey", linestyle=":", label=f"baseline {baseline:.3f}")
    ax.set_xlabel("submission")
    ax.set_ylabel("score")
    ax.set_xticks(steps)
    ax.set_title(title)
    ax.legend(loc="best")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return save_figure(fig, path)


def save_figure(fig: Any, path: Path) -> Path:
    """Write a matplotlib figure as PNG, atomically (an open UI never shows half an image), and free it."""
    import matplotlib.pyplot as plt

    image = io.BytesIO()
    fig.savefig(image, format="png")
    plt.close(fig)
    return atomic_write_bytes(path, image.getvalue())
