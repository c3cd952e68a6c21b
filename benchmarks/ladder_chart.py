"""One picture of a whole ladder: per rung, each policy's private score (mean ± SE over seeds) as bars, with the
oracle's reach ((a) plus the best gain benchmarks/ladder_oracle.py found within (a)'s compute) as a mark.

    .venv/bin/python benchmarks/ladder_chart.py LADDER.json [--oracle ORACLE.json] [--out ladder.png]

LADDER.json is research_ladder.py's --out file; nothing is run, only drawn.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

from research_ladder import _private as private  # noqa: E402  (a run that submitted nothing: its base's score)
from research_ladder import mean_se, oracle_gains  # noqa: E402

LABELS = {"once": "(a) once", "lines": "lines (the default)"}
COLOURS = {"once": "#7f7f7f", "lines": "#1f77b4", "halving": "#2ca02c", "tree": "#ff7f0e", "seeds": "#9467bd"}


def draw(runs: dict[str, dict[str, list[dict[str, Any]]]], oracle: dict[str, Any], out: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rungs = list(runs)
    policies = list(dict.fromkeys(p for by_policy in runs.values() for p in by_policy))
    width = 0.8 / max(1, len(policies))
    fig, ax = plt.subplots(figsize=(max(7.0, 1.25 * len(rungs)), 4.4))
    for i, policy in enumerate(policies):
        xs, means, ses = [], [], []
        for x, rung in enumerate(rungs):
            scores = [private(r) for r in runs[rung].get(policy, [])]
            if scores:
                mean, se = mean_se(scores)
                xs.append(x + (i - (len(policies) - 1) / 2) * width)
                means.append(mean)
                ses.append(0.0 if se != se else se)
        ax.bar(
            xs, means, width, yerr=ses, capsize=2, label=LABELS.get(policy, policy), color=COLOURS.get(policy)
        )
    marked = False
    for x, rung in enumerate(rungs):
        if rung in oracle and runs[rung].get("once"):
            reach = statistics.fmean(private(r) for r in runs[rung]["once"]) + oracle[rung][1]
            ax.hlines(
                reach,
                x - 0.45,
                x + 0.45,
                colors="black",
                linestyles="dashed",
                label="_nolegend_" if marked else "(a) + oracle's best gain",
            )
            marked = True
    ax.set_xticks(range(len(rungs)), rungs, rotation=20, ha="right")
    ax.set_ylabel("private test score (mean ± SE over seeds)")
    ax.set_ylim(0, 1)
    ax.set_title("the research ladder: each policy at equal compute")
    ax.legend(loc="upper left", fontsize=8, ncols=2)
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("ladder", type=Path, help="research_ladder.py's --out file")
    parser.add_argument("--oracle", type=Path, default=None, help="ladder_oracle.py's --out file")
    parser.add_argument("--out", type=Path, default=Path("ladder.png"))
    args = parser.parse_args(argv)
    try:
        runs = json.loads(args.ladder.read_text())["runs"]
    except (OSError, ValueError, KeyError) as exc:
        parser.error(
            f"{args.ladder} is not a research_ladder.py --out file ({exc}); run the ladder with --out first"
        )
    oracle = oracle_gains(args.oracle) if args.oracle else {}
    draw(runs, oracle, args.out)
    print(f"wrote {args.out}: {len(runs)} rungs")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
