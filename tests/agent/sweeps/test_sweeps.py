"""Sweeps: deterministic run ids, a resumable manifest, the comparison report, and real sweeps (local and Ray)."""

from __future__ import annotations

import io
import json
from pathlib import Path

import pytest
from rich.console import Console

from agent.sweeps import manifest as manifests
from agent.sweeps.report import compare, run_numbers, welch_p, write_report
from agent.sweeps.spec import SweepSpec

FAST = {"eval_limit": 40, "sandbox": "local", "trial_timeout": 240, "public_fraction": 0.0}


def test_run_ids_are_deterministic_unique_and_safe() -> None:
    spec = SweepSpec(
        sweep_id="s1",
        benchmarks="arith,gsm8k",
        base_models=["tiny-arith", "org/Model-7B"],
        agents="builtin,llm",
        seeds=2,
    )
    ids = [c.run_id("s1") for c in spec.combinations()]
    assert len(ids) == 16 and len(set(ids)) == 16
    assert ids == [c.run_id("s1") for c in spec.combinations()]
    assert all(len(i) <= 128 and all(ch.isalnum() or ch in "-_." for ch in i) for i in ids)
    with pytest.raises(ValueError, match="sweep id"):
        SweepSpec(sweep_id="bad id/..", benchmarks="arith", base_models="tiny-arith")


def test_manifest_keeps_finished_runs_and_resumes_the_rest(tmp_path: Path) -> None:
    spec = SweepSpec(sweep_id="s2", benchmarks="arith", base_models="tiny-arith", seeds=3)
    manifest = manifests.open_manifest(tmp_path, spec)
    first, second, third = manifest.entries.values()
    first.status, second.status = "finished", "running"  # the driver died while `second` ran
    manifests.save(tmp_path, manifest)
    assert json.loads(manifests.manifest_path(tmp_path, "s2").read_text())["sweep_id"] == "s2"
    again = manifests.open_manifest(tmp_path, spec)
    assert [e.status for e in again.entries.values()] == ["finished", "interrupted", "pending"]
    assert [e.run_id for e in again.pending()] == [second.run_id, third.run_id]


def _fake_finished_run(
    home: Path, entry: manifests.Entry, improvement: float, copies: int = 0, isolation: str = "namespaces"
) -> None:
    run_dir = home / "runs" / entry.run_id
    run_dir.mkdir(parents=True)
    grader = {
        "baseline_score": 0.2,
        "best_score": 0.2 + improvement,
        "improvement": improvement,
        "total_submissions": 2,
        "time_to_best": 10.0,
        "valid_submission_rate": 1.0,
        "copy_model_count": copies,
        "reported": {
            "scored_on": "public",
            "baseline": 0.2,
            "best": 0.2 + improvement,
            "improvement": improvement,
        },
    }
    summary = {"status": "finished", "grader": grader, "isolation": isolation}
    (run_dir / "summary.json").write_text(json.dumps(summary))
    entry.status = "finished"


def test_report_marks_noise_and_real_differences(tmp_path: Path) -> None:
    spec = SweepSpec(
        sweep_id="s3", benchmarks="arith", base_models="tiny-arith", agents="builtin,llm", seeds=3
    )
    manifest = manifests.open_manifest(tmp_path, spec)
    gains = {"builtin": [0.10, 0.12, 0.11], "llm": [0.30, 0.31, 0.29]}
    for entry in manifest.entries.values():
        _fake_finished_run(tmp_path, entry, gains[entry.combination.agent][entry.combination.seed])
    groups = {g.agent: g for g in compare(run_numbers(tmp_path, manifest))}
    assert groups["llm"].verdict == "best"
    assert groups["builtin"].verdict.startswith("worse than llm (Welch")
    assert groups["builtin"].stats["improvement"].mean == pytest.approx(0.11)
    assert groups["builtin"].stats["improvement"].se == pytest.approx(0.01 / 3**0.5)
    markdown, md_path, plot = write_report(tmp_path, manifest)
    assert md_path.read_text() == markdown and "| arith | tiny-arith | llm | 3 |" in markdown
    assert plot is not None and plot.stat().st_size > 0


def test_report_keeps_unisolated_runs_apart(tmp_path: Path) -> None:
    spec = SweepSpec(sweep_id="s4", benchmarks="arith", base_models="tiny-arith", seeds=4)
    manifest = manifests.open_manifest(tmp_path, spec)
    for entry in manifest.entries.values():
        seed = entry.combination.seed
        _fake_finished_run(tmp_path, entry, 0.1 + seed / 100, isolation="none" if seed >= 2 else "container")
    groups = {g.agent: g for g in compare(run_numbers(tmp_path, manifest))}
    assert set(groups) == {"builtin", "builtin [isolation=none]"}
    assert (
        groups["builtin"].stats["improvement"].n == 2
        and groups["builtin [isolation=none]"].stats["improvement"].n == 2
    )
    markdown, _, _ = write_report(tmp_path, manifest)
    assert "| builtin [isolation=none] | 2 |" in markdown


def test_report_and_manifest_give_the_rows_figures_on_a_split_test_set(tmp_path: Path) -> None:
    """public_fraction 0.5: the report and the sweep table show what results.csv shows (the private pair), never
    the public one; with no unflagged submission, best = baseline and improvement 0."""
    spec = SweepSpec(sweep_id="s5", benchmarks="arith", base_models="tiny-arith", seeds=2)
    manifest = manifests.open_manifest(tmp_path, spec)
    improved, nothing = manifest.entries.values()
    finals = {
        improved.run_id: {"best_private": 0.4, "best_public": 0.5, "best_id": 1},
        nothing.run_id: {"best_private": 0.25, "best_public": 0.2, "best_id": None},
    }
    for entry in (improved, nothing):
        f = finals[entry.run_id]
        grader = {
            "baseline_score": 0.2,
            "best_score": f["best_public"],
            "improvement": f["best_public"] - 0.2,
            "baseline_private_score": 0.25,
            "final_private_score": f["best_private"],
            "best_submission_id": f["best_id"],
            "total_submissions": 1,
            "public_private_split": True,
            "reported": {
                "scored_on": "private",
                "baseline": 0.25,
                "best": f["best_private"],
                "improvement": f["best_private"] - 0.25,
            },
        }
        run_dir = tmp_path / "runs" / entry.run_id
        run_dir.mkdir(parents=True)
        summary = {"status": "finished", "grader": grader, "baseline": "0.2500", "isolation": "namespaces"}
        (run_dir / "summary.json").write_text(json.dumps(summary))
        entry.status = "finished"
        manifests.entry_from_summary(entry, summary)
    numbers = {r.run_id: r.values for r in run_numbers(tmp_path, manifest)}
    assert numbers[improved.run_id]["baseline"] == 0.25 and numbers[improved.run_id]["best"] == 0.4
    assert numbers[improved.run_id]["improvement"] == pytest.approx(0.15)
    assert (numbers[nothing.run_id]["best"], numbers[nothing.run_id]["improvement"]) == (0.25, 0.0)
    assert (improved.baseline, improved.best, improved.submissions) == (0.25, 0.4, 1)
    assert (nothing.baseline, nothing.best) == (0.25, 0.25)


def test_report_calls_overlapping_results_noise() -> None:
    assert (welch_p([0.1, 0.3, 0.2], [0.15, 0.25, 0.2]) or 0) > 0.05
    assert (welch_p([0.1, 0.11, 0.12], [0.5, 0.51, 0.52]) or 1) < 0.05
    assert welch_p([0.1], [0.2, 0.3]) is None


def _spec(sweep_id: str, **extra: object) -> SweepSpec:
    return SweepSpec(
        sweep_id=sweep_id,
        benchmarks="arith",
        base_models="tiny-arith",
        agents="builtin",
        seeds=1,
        timeout=600,
        loop_n=1,
        run_overrides=FAST,
        **extra,
    )


@pytest.mark.slow
def test_local_sweep_runs_tags_mlflow_and_is_not_repeated(tiny_model_home: Path) -> None:
    from mlflow import MlflowClient

    from agent.sweeps.driver import run_sweep

    console = Console(file=io.StringIO())
    manifest = run_sweep(_spec("sw-local"), tiny_model_home, console=console, refresh_s=0.5)
    assert manifest.status == "finished", manifest.model_dump_json(indent=1)
    (entry,) = manifest.entries.values()
    assert entry.baseline is not None and entry.attempts == 1 and entry.mlflow_parent
    client = MlflowClient(tracking_uri=f"sqlite:///{tiny_model_home.resolve() / 'mlflow.db'}")
    assert client.get_run(entry.mlflow_parent).data.tags["rlloop.sweep_id"] == "sw-local"
    sweep_runs = client.search_runs(
        [client.get_experiment_by_name("rlloop/sweeps").experiment_id], "tags.`rlloop.sweep_id` = 'sw-local'"
    )
    assert len(sweep_runs) == 1
    mtime = (tiny_model_home / "runs" / entry.run_id / "summary.json").stat().st_mtime
    again = run_sweep(_spec("sw-local"), tiny_model_home, console=console, refresh_s=0.5)
    assert again.entries[entry.run_id].attempts == 1  # finished: not queued again
    assert (tiny_model_home / "runs" / entry.run_id / "summary.json").stat().st_mtime == mtime
