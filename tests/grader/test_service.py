"""GraderService in-process: baseline identity across eval configs and crash-retry bookkeeping."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from grader.config import EvalConfig, GraderConfig
from grader.service import GraderService
from grader.store import Store

pytestmark = pytest.mark.slow


def _config(tmp_path: Path, base: Path, **eval_fields: object) -> GraderConfig:
    return GraderConfig(
        run_id="svc",
        benchmark="arith",
        base_model=base,
        private_dir=tmp_path / "private",
        token="t" * 16,
        allowed_roots=[tmp_path / "ws"],
        eval=EvalConfig.model_validate({"limit": 10, **eval_fields}),
        torch_threads=1,
    )


def _started(config: GraderConfig) -> GraderService:
    service = GraderService(config)
    service.start()
    assert service.ready, service.startup_error
    return service


def _baseline_count(tmp_path: Path) -> int:
    store = Store(tmp_path / "private" / "store.db")
    try:
        return int(store._db.execute("SELECT COUNT(*) FROM baselines").fetchone()[0])
    finally:
        store.close()


def test_baselines_are_keyed_by_eval_config(tmp_path: Path, tiny_base: Path) -> None:
    torch.set_num_threads(1)
    first = _started(_config(tmp_path, tiny_base))
    first.stop()
    assert _baseline_count(tmp_path) == 1
    other = _started(_config(tmp_path, tiny_base, limit=12))
    assert other.baseline is not None and other.baseline.n == 12
    other.stop()
    assert _baseline_count(tmp_path) == 2  # a different config never reuses the cached baseline
    same = _started(_config(tmp_path, tiny_base))
    same.stop()
    assert _baseline_count(tmp_path) == 2  # the same config does


def test_submission_that_crashed_the_grader_too_often_is_failed(tmp_path: Path, tiny_base: Path) -> None:
    torch.set_num_threads(1)
    store = Store(tmp_path / "private" / "store.db")
    with store.transaction() as db:
        row = store.insert(
            db, model_path=str(tmp_path / "ws" / "m"), content_hash="h", status="evaluating", attempts=2
        )
    store.close()
    service = _started(_config(tmp_path, tiny_base))
    try:
        failed = service.store.get(row.id)
        assert failed.status == "failed" and "stopped 2 times" in (failed.error or "")
    finally:
        service.stop()


def test_a_run_that_ever_trained_unisolated_says_so_on_every_score(tmp_path: Path, tiny_base: Path) -> None:
    """Isolation is stamped on the grader's scores, and the weakest level over the run's starts sticks."""
    first = _started(_config(tmp_path, tiny_base).model_copy(update={"isolation": "none"}))
    assert first.scores()["isolation"] == "none"
    first.store.close()
    resumed = _started(_config(tmp_path, tiny_base).model_copy(update={"isolation": "namespaces"}))
    # a better sandbox on resume does not wash the earlier trials clean
    assert resumed.scores()["isolation"] == "none"
    resumed.store.close()
    fresh = _started(_config(tmp_path / "other", tiny_base).model_copy(update={"isolation": "namespaces"}))
    assert fresh.scores()["isolation"] == "namespaces"
