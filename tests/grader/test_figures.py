"""The score rule, as the grader's finalize reports it: one consistent pair (private when the test set is split,
public otherwise), and with no unflagged submission best = baseline and improvement 0.0 on both parts."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from grader.config import GraderConfig
from grader.figures import run_figures
from grader.service import GraderService
from grader.store import Baseline


def _service(tmp_path: Path, public_fraction: float | None) -> GraderService:
    """A finalize-ready service over a store filled by hand: no model is loaded or scored."""
    config = GraderConfig(
        run_id="figures",
        benchmark="arith",
        base_model=tmp_path / "base",
        private_dir=tmp_path / "private",
        token="t" * 16,
        allowed_roots=[tmp_path / "ws"],
        public_fraction=public_fraction,
    )
    service = GraderService(config)
    split = config.split_enabled
    service.baseline = Baseline(
        key="k",
        eval_config_hash="e",
        score=0.22,
        public_score=0.2,
        private_score=0.25 if split else None,
        n=10,
        ci_low=0.1,
        ci_high=0.3,
        seconds=1.0,
        created_at=0.0,
    )
    service.ready = True
    return service


def _submit(service: GraderService, public: float, private: float, *, flagged: bool = False) -> int:
    flags = json.dumps([{"check": "base_copy", "evidence": "x"}] if flagged else [])
    with service.store.transaction() as db:
        row = service.store.insert(
            db,
            model_path="/ws/m",
            content_hash=f"h{public}{private}",
            status="done",
            score=(public + private) / 2,
            public_score=public,
            private_score=private,
            flags=flags,
        )
    return row.id


def test_run_figures_no_best_is_the_baseline() -> None:
    assert run_figures(0.3, None).model_dump() == {
        "scored_on": "public",
        "baseline": 0.3,
        "best": 0.3,
        "improvement": 0.0,
    }
    assert run_figures(0.3, 0.5, "private").improvement == pytest.approx(0.2)


def test_split_reports_the_private_pair(tmp_path: Path) -> None:
    service = _service(tmp_path, public_fraction=0.5)
    try:
        _submit(service, public=0.5, private=0.4)
        final = service.finalize().model_dump()
    finally:
        service.stop()
    assert final["reported"]["scored_on"] == "private"
    assert (final["reported"]["baseline"], final["reported"]["best"]) == (0.25, 0.4)
    assert final["reported"]["improvement"] == pytest.approx(0.15)
    assert (final["baseline_score"], final["best_score"]) == (
        0.2,
        0.5,
    )  # the public pair, as /scores showed it
    assert final["private_improvement"] == pytest.approx(final["reported"]["improvement"])


def test_no_split_reports_the_public_pair(tmp_path: Path) -> None:
    service = _service(tmp_path, public_fraction=0.0)
    try:
        _submit(service, public=0.5, private=0.5)
        final = service.finalize().model_dump()
    finally:
        service.stop()
    assert final["reported"] == {"scored_on": "public", "baseline": 0.2, "best": 0.5, "improvement": 0.3}
    assert final["public_private_split"] is False


@pytest.mark.parametrize("public_fraction", [0.0, 0.5])
def test_no_unflagged_submission_is_the_baseline_on_both_parts(
    tmp_path: Path, public_fraction: float
) -> None:
    service = _service(tmp_path, public_fraction=public_fraction)
    try:
        _submit(service, public=0.9, private=0.9, flagged=True)  # flagged: never the best
        final = service.finalize().model_dump()
    finally:
        service.stop()
    reported = final["reported"]
    assert final["best_submission_id"] is None
    assert reported["best"] == reported["baseline"] and reported["improvement"] == 0.0
    assert reported["scored_on"] == ("private" if public_fraction else "public")
    assert (final["best_score"], final["improvement"]) == (final["baseline_score"], 0.0)
    assert final["final_private_score"] == final["baseline_private_score"]
    assert final["private_improvement"] == 0.0
