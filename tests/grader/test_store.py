"""The grader's SQLite store: WAL, persistence across reopen, exactly-once bookkeeping, atomic mirror."""

from __future__ import annotations

import json
import time
from pathlib import Path

from grader.service import public_ids
from grader.store import Baseline, Store, write_json_atomically


def test_store_persists_and_reports_unfinished(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    assert store._db.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.set_meta("started_at", "1.0", only_if_missing=True) == "1.0"
    assert store.set_meta("started_at", "2.0", only_if_missing=True) == "1.0"
    with store.transaction() as db:
        a = store.insert(db, model_path="/ws/a", content_hash="h1", status="queued")
        b = store.insert(db, model_path="/ws/b", content_hash="h2", status="queued")
        store.insert(db, model_path="/ws/a2", content_hash="h1", status="done", duplicate_of=a.id)
        store.insert(db, model_path="/ws/bad", status="failed", error="not a model folder")
    store.update(a.id, status="evaluating", attempts=1)
    store.update(b.id, status="done", public_score=0.5, score=0.5)
    store.put_baseline(
        Baseline(
            key="k",
            eval_config_hash="e",
            score=0.1,
            public_score=0.1,
            private_score=0.2,
            n=10,
            ci_low=0.0,
            ci_high=0.3,
            seconds=1.0,
            created_at=time.time(),
        )
    )
    store.close()

    again = Store(tmp_path / "store.db")
    assert [s.id for s in again.unfinished()] == [a.id]  # the duplicate and the failed row are not work
    assert again.get(a.id).attempts == 1
    with again.transaction() as db:
        assert again.find_original(db, "h1").id == a.id  # type: ignore[union-attr]
        assert again.counted(db)[0] == 2  # duplicates and rejected paths use up no budget
    baseline = again.get_baseline("k")
    assert baseline is not None and baseline.private_score == 0.2 and again.get_baseline("other") is None
    assert len(again.all()) == 4


def test_failed_transaction_rolls_back(tmp_path: Path) -> None:
    store = Store(tmp_path / "store.db")
    try:
        with store.transaction() as db:
            store.insert(db, model_path="/ws/a", content_hash="h", status="queued")
            raise RuntimeError("boom")
    except RuntimeError:
        pass
    assert store.all() == []


def test_mirror_is_written_atomically(tmp_path: Path) -> None:
    target = tmp_path / "run" / "scores.json"
    write_json_atomically(target, {"a": 1})
    write_json_atomically(target, {"a": 2})
    assert json.loads(target.read_text()) == {"a": 2}
    assert [p.name for p in target.parent.iterdir()] == ["scores.json"]


def test_public_split_is_seeded_and_proper() -> None:
    ids = [f"s{i}" for i in range(100)]
    public = public_ids(ids, 0.3, seed=0)
    assert len(public) == 30 and public == public_ids(ids, 0.3, seed=0)
    assert public != public_ids(ids, 0.3, seed=1)
    assert public_ids(ids, None, seed=0) == set(ids)
    assert 1 <= len(public_ids(ids[:3], 0.01, seed=0)) <= 2


def test_a_store_from_before_flags_gains_the_column(tmp_path: Path) -> None:
    import sqlite3

    path = tmp_path / "old.db"
    db = sqlite3.connect(path)
    db.execute(
        "CREATE TABLE submissions (id INTEGER PRIMARY KEY AUTOINCREMENT, model_path TEXT NOT NULL, "
        "content_hash TEXT, status TEXT NOT NULL, score REAL, public_score REAL, private_score REAL, n INTEGER, "
        "ci_low REAL, ci_high REAL, error TEXT, created_at REAL NOT NULL, started_at REAL, finished_at REAL, "
        "is_copy INTEGER NOT NULL DEFAULT 0, duplicate_of INTEGER, attempts INTEGER NOT NULL DEFAULT 0, "
        "per_sample TEXT)"
    )
    db.execute("INSERT INTO submissions(model_path, status, created_at) VALUES ('/m', 'done', 1.0)")
    db.commit()
    db.close()
    store = Store(path)
    try:
        (old,) = store.all()
        assert old.flags == "[]" and not old.flagged  # rows written before the column keep working
        flagged = store.update(old.id, flags='[{"check": "base_copy", "evidence": "distance 0"}]')
        assert flagged.flagged and flagged.flag_list[0]["check"] == "base_copy"
    finally:
        store.close()
    assert Store(path).get(old.id).flagged  # and opening it again changes nothing
