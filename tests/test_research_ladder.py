"""benchmarks/research_ladder.py end to end, as a smoke test only: real runs of the fixed recipe and the tree on a
tiny arith rung, their figures read back from the grader, the table, the property check and the plot. Nothing is
ranked here (a two-trial rung on 60 test samples separates nothing); the comparison's figures are in docs/research.md."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))

import research_ladder  # noqa: E402


@pytest.mark.slow
def test_the_ladder_runs_end_to_end(
    tmp_path: Path, tiny_model_dir: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    home = tmp_path / "home"
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    out, plots = tmp_path / "ladder.json", tmp_path / "plots"
    assert (
        research_ladder.main(["--smoke", "--home", str(home), "--out", str(out), "--plots", str(plots)]) == 0
    )
    runs = json.loads(out.read_text())["runs"]["arith"]
    default = research_ladder.BUILTIN_POLICY
    assert set(runs) == {"once", default}
    once, line = runs["once"][0], runs[default][0]
    # clean data and two trials' worth (too little to probe anything): the default is (a) itself, one trial
    assert len(once["trials"]) == 1 and len(line["trials"]) == 1
    for run in (once, line):
        assert 0.0 <= run["baseline_private"] <= 1.0 and run["compute_s"] > 0
        assert run["curve"][0] == [0.0, run["baseline_private"]]
        assert all(t["recipe"] == "sft" and t["valid"] is not None for t in run["trials"])
        assert run["compute_account"]["total_s"] == pytest.approx(run["compute_s"], abs=0.2)
    printed = capsys.readouterr().out
    assert "arith       once    private" in printed and f"arith       {default:<7} private" in printed
    assert f"{default} vs (a), paired by seed" in printed
    assert "base model in [5%, 40%) on the hidden test set" in printed
    assert (plots / "ladder_arith.png").stat().st_size > 10_000


def test_the_property_check_reads_the_runs() -> None:
    """The four properties from hand-made run figures: what holds, what fails, what was not measured."""

    def run(seed: int, private: float, trials: list[tuple[str, float, float]]) -> dict[str, object]:
        return {
            "seed": seed,
            "private": private,
            "baseline_private": 0.1,
            "trials": [
                {"recipe": r, "lr": lr, "valid": v, "private": v, "status": "succeeded"}
                for r, lr, v in trials
            ],
        }

    rung = research_ladder.RUNGS["arith"]
    by_policy = {
        "seeds": [
            run(0, 0.3, [("sft", 1e-3, 0.30), ("sft", 1e-3, 0.32)]),
            run(1, 0.31, [("sft", 1e-3, 0.31)]),
        ],
        "tree": [
            run(0, 0.6, [("grpo", 1e-4, 0.60), ("grpo", 1e-4, 0.62)]),
            run(1, 0.58, [("grpo", 1e-4, 0.59)]),
        ],
    }
    checks = {
        what.split(" ")[0] + what.split(" ")[1]: held
        for what, held, _ in research_ladder.property_check(rung, by_policy)
    }
    assert checks == {"basemodel": True, "onedefault": True, "somereachable": True, "tworegions": True}
    for first in by_policy["seeds"]:  # one default trial saturates (on the private half)
        first["trials"][0]["private"] = 0.9  # type: ignore[index]
    held = [h for _, h, _ in research_ladder.property_check(rung, by_policy)]
    assert held[1] is False and held[2] is False
    assert [h for _, h, _ in research_ladder.property_check(rung, {"tree": by_policy["tree"]})][1] is None


def test_every_rung_pairs_a_builtin_benchmark_with_a_builtin_model_built_for_it() -> None:
    """Each rung's base model is built locally (no hub) from its own benchmark's train split (a variant's: the
    benchmark it varies, whose problems and test reserve it shares)."""
    from agent.run.models import BUILTIN_MODELS
    from tasks.registry import BUILTINS
    from trainers.tiny import TINY_RECIPES

    assert len(research_ladder.RUNGS) >= 3
    for name, rung in research_ladder.RUNGS.items():
        assert rung.benchmark in BUILTINS and rung.base_model in BUILTIN_MODELS, name
        built_on = getattr(
            BUILTINS[rung.benchmark], "variant_of", rung.benchmark
        )  # arith-noisy: arith's problems
        assert TINY_RECIPES[rung.base_model].benchmark == built_on, name
        assert rung.recipes.split(",")[0] == "sft", name
        assert rung.trials * rung.trial_seconds <= (400 if name.endswith("-x4") else 100), name  # wall s


def test_memory_is_compared_with_the_tree_paired_by_seed() -> None:
    """(f) the tree with an earlier run's lessons against the tree alone: the score and compute-to-best differences
    paired by seed, the lesson runs' own figures beside them; nothing printed without both policies."""

    def run(seed: int, private: float, to_best: float, **extra: float) -> dict[str, object]:
        return {
            "seed": seed,
            "private": private,
            "baseline_private": 0.1,
            "compute_to_best_s": to_best,
            **extra,
        }

    by_policy = {
        "tree": [run(0, 0.30, 100.0), run(1, 0.40, 80.0)],
        "memory": [
            run(1, 0.50, 40.0, lesson_private=0.35, lesson_compute_s=120.0),
            run(0, 0.30, 60.0, lesson_private=0.25, lesson_compute_s=110.0),
        ],
    }
    line = research_ladder.memory_against_tree(by_policy)  # type: ignore[arg-type]
    assert line is not None
    assert "private 0.050 ± 0.050" in line and "compute to best -40 ± 0 s" in line
    assert "private 0.300 ± 0.050, 115 ± 5 s each" in line
    assert research_ladder.memory_against_tree({"tree": by_policy["tree"]}) is None  # type: ignore[dict-item]
    assert "memory" not in research_ladder.DEFAULT_POLICIES  # (f) on request


def test_the_ladder_warns_when_niced_work_beside_it_would_still_take_its_cpu(tmp_path: Path) -> None:
    switch = tmp_path / "sched_autogroup_enabled"
    switch.write_text("1\n")
    warning = research_ladder.shared_machine_warning(switch)
    assert warning is not None and "nice" in warning and str(switch) in warning
    switch.write_text("0\n")
    assert research_ladder.shared_machine_warning(switch) is None
    assert research_ladder.shared_machine_warning(tmp_path / "missing") is None


def test_each_policy_is_held_to_a_against_one_se_and_to_the_oracles_reachable_gain() -> None:
    def run(seed: int, private: float) -> dict[str, object]:
        return {"seed": seed, "private": private, "baseline_private": 0.1}

    by_policy = {
        "once": [run(0, 0.30), run(1, 0.40), run(2, 0.35)],
        "lines": [run(0, 0.60), run(1, 0.72), run(2, 0.63)],
        "tree": [run(0, 0.31), run(1, 0.38), run(2, 0.36)],
    }
    lines = research_ladder.against_once("lines", by_policy)  # type: ignore[arg-type]
    assert lines is not None and lines.endswith("-> above (n=3)")
    tree = research_ladder.against_once("tree", by_policy)  # type: ignore[arg-type]
    assert tree is not None and "within one SE" in tree
    assert research_ladder.against_once("once", by_policy) is None  # type: ignore[arg-type]
    share = research_ladder.reachable_share("lines", by_policy, ("filtered", 0.4, True))  # type: ignore[arg-type]
    assert share is not None and "share of the reachable gain 75%" in share and "(e) holds" in share


def test_the_real_model_rung_is_named_not_run_by_default() -> None:
    """arith-smollm2 runs with --rungs (its runs are minutes long), in the model's chat template, trials long enough
    for a 135M model's start-up and 5-s steps; --smoke keeps that length."""
    from agent.run.models import BUILTIN_MODELS

    rung = research_ladder.REAL_RUNGS["arith-smollm2"]
    assert "arith-smollm2" not in research_ladder.RUNGS and rung.base_model in BUILTIN_MODELS
    command = research_ladder._command("r", rung, "tree", 0, 1)
    assert command[command.index("--prompt-format") + 1] == "chat"
    assert float(command[command.index("--trial-seconds") + 1]) == 180 and rung.smoke_seconds >= 60
    tiny = research_ladder._command("r", research_ladder.RUNGS["arith"], "tree", 0, 1)
    assert tiny[tiny.index("--prompt-format") + 1] == "plain"
