"""benchmarks/ladder_oracle.py: property (e) from hand-made figures (what holds, what fails, what is over budget), the
grids' stages checked against their recipes' configs, and one smoke run end to end."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import ladder_oracle  # noqa: E402
from ladder_oracle import A_NAME, GRIDS, RunFigures, compare, verdict  # noqa: E402


def _runs(entry: str, scores: list[float], cpu: float = 50.0) -> list[RunFigures]:
    return [RunFigures("r", entry, entry, seed, s, 400, cpu, cpu, cpu) for seed, s in enumerate(scores)]


def test_e_holds_only_for_a_gain_of_ten_points_and_three_standard_errors() -> None:
    a = _runs(A_NAME, [0.20, 0.22, 0.24])
    wide = compare(_runs("wide", [0.40, 0.43, 0.44]), a, "wide")
    assert wide.gain == pytest.approx(0.2033, abs=1e-3) and verdict([wide]) == (wide, True)
    small = compare(_runs("small", [0.28, 0.30, 0.33]), a, "small")  # 8.3 points: many SE, too few points
    assert verdict([small])[1] is False
    noisy = compare(_runs("noisy", [0.10, 0.50, 0.70]), a, "noisy")  # 28 points, under 3 SE
    assert noisy.se_used == max(noisy.paired_se, noisy.unpaired_se) and verdict([noisy])[1] is False
    costly = compare(_runs("costly", [0.60, 0.61, 0.62], cpu=60.0), a, "costly")  # 1.2x (a)'s CPU seconds
    assert not costly.in_budget and verdict([costly, small]) == (small, False)
    assert verdict([costly]) == (None, None)
    assert verdict([compare(_runs("one", [0.9]), a[:1], "one")])[1] is None  # one seed: no SE, no verdict


def test_every_grid_is_a_ladder_rung_and_every_stage_a_valid_recipe_config(tmp_path: Path) -> None:
    from research_ladder import RUNGS

    from trainers.registry import get_recipe

    assert set(GRIDS) <= set(RUNGS)
    new = [name for name, grid in GRIDS.items() if "default recipe's own task" not in grid.why]
    assert len(new) >= 3
    for name, grid in GRIDS.items():
        recipes = RUNGS[name].recipes.split(",")
        for route in grid.routes:
            for stage in route.stages:
                assert stage.recipe in recipes, (name, route.name)  # a move the rung's policies can make
                get_recipe(stage.recipe).parse_config(
                    {**stage.config(), "model_path": tmp_path, "train_file": tmp_path, "output_dir": tmp_path}
                )


@pytest.mark.slow
def test_the_oracle_runs_end_to_end(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    out, resume = tmp_path / "oracle.json", tmp_path / "runs.jsonl"
    argv = [
        "--smoke",
        "--home",
        str(home),
        "--work",
        str(tmp_path / "w"),
        "--out",
        str(out),
        "--resume",
        str(resume),
    ]
    assert ladder_oracle.main(argv) == 0
    runs = json.loads(out.read_text())["runs"]["arith"]
    assert {r["entry"] for r in runs} == {A_NAME, "sft lr 2e-3", "sft 2, then rft"} and len(runs) == 6
    assert all(0.0 <= r["score"] <= 1.0 and r["cpu_s"] > 0 and r["n"] == 40 for r in runs)
    assert [r["steps"] for r in runs if r["entry"] == "sft 2, then rft"] == [[2, 1], [2, 1]]
    printed = capsys.readouterr().out
    assert (
        "(a) = sft at its defaults (lr 0.001, warm-up 5% of the steps, linear schedule), 3 steps" in printed
    )
    assert "(e) " in printed
    assert len(resume.read_text().splitlines()) == 6
    from research_ladder import (
        oracle_gains,
    )  # the ladder reads this file for its "share of the reachable gain"

    best, gain, _ = oracle_gains(out)["arith"]
    assert best in {"sft lr 2e-3", "sft 2, then rft"} and -1.0 <= gain <= 1.0
    assert ladder_oracle.main(argv) == 0  # everything reused from the resume file
    assert "arith: 0 runs to go, 6 reused" in capsys.readouterr().out
