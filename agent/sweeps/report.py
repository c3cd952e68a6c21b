"""`rlloop report`: compare the agents of a sweep per benchmark and base model, as mean ± standard error over
seeds, and say which differences are within noise. Writes Markdown and a PNG next to the manifest; results.csv
stays the raw data."""

from __future__ import annotations

import json
import math
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

from pydantic import BaseModel

from agent.results import save_figure, summary_figures
from agent.sweeps.manifest import Manifest
from agent.sweeps.outcomes import sweeps_dir
from tasks.atomic import atomic_write_text

METRICS = (
    "baseline",
    "best",
    "improvement",
    "submissions",
    "time_to_best",
    "valid_submission_rate",
    "copy_model_count",
    "llm_calls",
    "llm_tokens",
    "llm_cost_usd",
)
ALPHA = 0.05


class RunNumbers(BaseModel):
    """One finished run's figures, from its summary.json: baseline, best and improvement as results.csv reports
    them (`agent.results.rows.summary_figures`), the rest from the grader's finalize section."""

    run_id: str
    benchmark: str
    base_model: str
    agent: str
    seed: int
    values: dict[str, float | None]


class Stat(BaseModel):
    n: int
    mean: float | None
    se: float | None


class GroupRow(BaseModel):
    benchmark: str
    base_model: str
    agent: str
    stats: dict[str, Stat]
    verdict: str = ""


def _number(value: Any) -> float | None:
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


def _agent_label(agent: str, isolation: Any) -> str:
    """Runs whose trials trained unisolated are their own group: their numbers are never pooled or ranked with
    those of isolated runs (a run from before isolation was recorded counts as isolated: docker was the only way)."""
    return f"{agent} [isolation=none]" if isolation == "none" else agent


def run_numbers(home: Path, manifest: Manifest) -> list[RunNumbers]:
    """Figures of every finished run of the sweep (runs without a summary are left out)."""
    rows = []
    for entry in manifest.entries.values():
        if entry.status != "finished":
            continue
        try:
            summary = json.loads((home / "runs" / entry.run_id / "summary.json").read_text())
        except (OSError, ValueError):
            continue
        grader = summary.get("grader") or {}
        figures = summary_figures(summary)  # what results.csv says: the grader's reported figures
        values = {
            "baseline": figures["baseline"],
            "best": figures["best_score"],
            "improvement": figures["improvement"],
            "submissions": float(figures["submissions"]),
            "time_to_best": _number(grader.get("time_to_best")),
            "valid_submission_rate": _number(grader.get("valid_submission_rate")),
            "copy_model_count": _number(grader.get("copy_model_count")),
            # what the run's LLM calls cost (driver LLM, or an external agent's through the gateway)
            "llm_calls": _number(summary.get("llm_calls")),
            "llm_tokens": _number(summary.get("llm_tokens")),
            "llm_cost_usd": _number(summary.get("llm_cost_usd")),
        }
        c = entry.combination
        rows.append(
            RunNumbers(
                run_id=entry.run_id,
                benchmark=c.benchmark,
                base_model=c.base_model,
                agent=_agent_label(c.agent_label, summary.get("isolation")),
                seed=c.seed,
                values=values,
            )
        )
    return rows


def mean_se(values: list[float]) -> Stat:
    if not values:
        return Stat(n=0, mean=None, se=None)
    mean = statistics.fmean(values)
    se = statistics.stdev(values) / math.sqrt(len(values)) if len(values) >= 2 else None
    return Stat(n=len(values), mean=mean, se=se)


def welch_p(a: list[float], b: list[float]) -> float | None:
    """Two-sided Welch t-test p-value; None when either side has fewer than 2 runs."""
    if len(a) < 2 or len(b) < 2:
        return None
    if statistics.stdev(a) == 0 and statistics.stdev(b) == 0:
        return 1.0 if statistics.fmean(a) == statistics.fmean(b) else 0.0
    from scipy import stats

    return float(stats.ttest_ind(a, b, equal_var=False).pvalue)


def compare(rows: list[RunNumbers]) -> list[GroupRow]:
    """Per (benchmark, base model): each agent's mean ± SE, and whether it differs from the best agent beyond noise
    (Welch p > 0.05 with n >= 2 on both sides, else overlapping mean ± 2·SE, counts as noise)."""
    grouped: dict[tuple[str, str, str], list[RunNumbers]] = defaultdict(list)
    for row in rows:
        grouped[(row.benchmark, row.base_model, row.agent)].append(row)
    out: list[GroupRow] = []
    for (benchmark, base_model, agent), runs in sorted(grouped.items()):
        stats_ = {m: mean_se([v for r in runs if (v := r.values.get(m)) is not None]) for m in METRICS}
        out.append(GroupRow(benchmark=benchmark, base_model=base_model, agent=agent, stats=stats_))
    cells: dict[tuple[str, str], list[GroupRow]] = defaultdict(list)
    for group in out:
        cells[(group.benchmark, group.base_model)].append(group)
    for (benchmark, base_model), groups in cells.items():
        scored = [g for g in groups if g.stats["improvement"].mean is not None]
        if len(scored) < 2:
            for g in groups:
                g.verdict = "only agent" if g in scored else "no finished runs"
            continue
        top = max(scored, key=lambda g: g.stats["improvement"].mean or 0.0)
        top_values = _values(rows, benchmark, base_model, top.agent)
        for g in scored:
            if g is top:
                g.verdict = "best"
                continue
            p = welch_p(top_values, _values(rows, benchmark, base_model, g.agent))
            if p is not None:
                g.verdict = (
                    f"within noise of {top.agent} (Welch p={p:.2f})"
                    if p > ALPHA
                    else f"worse than {top.agent} (Welch p={p:.3f})"
                )
            else:
                g.verdict = (
                    f"within noise of {top.agent} (mean ± 2·SE overlap)"
                    if _overlap(top.stats["improvement"], g.stats["improvement"])
                    else f"worse than {top.agent} (no overlap of mean ± 2·SE)"
                )
    return out


def _values(rows: list[RunNumbers], benchmark: str, base_model: str, agent: str) -> list[float]:
    return [
        v
        for r in rows
        if r.benchmark == benchmark
        and r.base_model == base_model
        and r.agent == agent
        and (v := r.values.get("improvement")) is not None
    ]


def _overlap(a: Stat, b: Stat) -> bool:
    """Do mean ± 2·SE intervals overlap? A single run has no SE: its interval is its value."""
    if a.mean is None or b.mean is None:
        return False
    lo_a, hi_a = a.mean - 2 * (a.se or 0.0), a.mean + 2 * (a.se or 0.0)
    lo_b, hi_b = b.mean - 2 * (b.se or 0.0), b.mean + 2 * (b.se or 0.0)
    return lo_a <= hi_b and lo_b <= hi_a


def _cell(stat: Stat, digits: int = 3) -> str:
    if stat.mean is None:
        return "–"
    if stat.se is None:
        return f"{stat.mean:.{digits}f}"
    return f"{stat.mean:.{digits}f} ± {stat.se:.{digits}f}"


def to_markdown(manifest: Manifest, groups: list[GroupRow], plot: Path | None) -> str:
    runs = len(manifest.entries)
    finished = sum(1 for e in manifest.entries.values() if e.status == "finished")
    lines = [
        f"# Sweep {manifest.sweep_id}",
        "",
        f"{finished} of {runs} runs finished. Values are mean ± standard error over seeds; "
        "differences with Welch p > 0.05 (n ≥ 2) or overlapping mean ± 2·SE are marked within noise. "
        "Agents marked [isolation=none] trained without a sandbox boundary and are kept apart. Baseline, best and "
        "improvement are what results.csv reports: the checkpoint each run chose on the public half, scored on the "
        "private half it never saw (the whole test set where a run has no split; its `scored_on` says which).",
        "",
        "| benchmark | base model | agent | n | baseline | best | improvement | submissions | time to best (s) "
        "| valid rate | copies | LLM calls | LLM tokens | LLM $ | verdict |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    for g in groups:
        s = g.stats
        lines.append(
            f"| {g.benchmark} | {Path(g.base_model).name} | {g.agent} | {s['improvement'].n} | {_cell(s['baseline'])} "
            f"| {_cell(s['best'])} | {_cell(s['improvement'])} | {_cell(s['submissions'], 1)} "
            f"| {_cell(s['time_to_best'], 0)} | {_cell(s['valid_submission_rate'], 2)} "
            f"| {_cell(s['copy_model_count'], 1)} | {_cell(s['llm_calls'], 1)} | {_cell(s['llm_tokens'], 0)} "
            f"| {_cell(s['llm_cost_usd'], 4)} | {g.verdict} |"
        )
    failed_agents = [e for e in manifest.entries.values() if e.agent_error]
    if failed_agents:
        lines += ["", "Agents that failed (their runs finished; success=False in results.csv):", ""]
        lines += [f"- {e.run_id}: agent failed: {e.agent_error}" for e in failed_agents]
    unfinished = [e for e in manifest.entries.values() if e.status != "finished"]
    if unfinished:
        lines += ["", "Not finished:", ""]
        lines += [f"- {e.run_id}: {e.status}{f' ({e.error})' if e.error else ''}" for e in unfinished]
    if plot is not None:
        lines += ["", f"![improvement by agent]({plot.name})"]
    return "\n".join(lines) + "\n"


def plot_groups(path: Path, groups: list[GroupRow]) -> Path | None:
    """Mean improvement ± SE per agent, one panel per benchmark/base model."""
    cells = sorted({(g.benchmark, g.base_model) for g in groups if g.stats["improvement"].mean is not None})
    if not cells:
        return None
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(cells), figsize=(3.6 * len(cells) + 1, 3.4), dpi=110, squeeze=False)
    for ax, (benchmark, base_model) in zip(axes[0], cells, strict=True):
        members = [
            g
            for g in groups
            if (g.benchmark, g.base_model) == (benchmark, base_model)
            and g.stats["improvement"].mean is not None
        ]
        means = [g.stats["improvement"].mean or 0.0 for g in members]
        errors = [g.stats["improvement"].se or 0.0 for g in members]
        ax.bar([g.agent for g in members], means, yerr=errors, capsize=4, color="tab:blue", alpha=0.8)
        ax.axhline(0.0, color="grey", linewidth=0.8)
        ax.set_title(f"{benchmark} / {Path(base_model).name}", fontsize=9)
        ax.set_ylabel("improvement over baseline")
        ax.grid(alpha=0.3, axis="y")
    fig.tight_layout()
    return save_figure(fig, path)


def write_report(home: Path, manifest: Manifest) -> tuple[str, Path, Path | None]:
    """(markdown, markdown path, plot path) under RLLOOP_HOME/sweeps/<sweep_id>/."""
    folder = sweeps_dir(home) / manifest.sweep_id
    groups = compare(run_numbers(home, manifest))
    plot = plot_groups(folder / "report.png", groups)
    markdown = to_markdown(manifest, groups, plot)
    md_path = folder / "report.md"
    atomic_write_text(md_path, markdown)
    return markdown, md_path, plot
