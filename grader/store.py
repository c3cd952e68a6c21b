"""The grader's durable state: SQLite (WAL) in its private folder.

Every submission is a row from the moment it is accepted (`queued`) to `done` or `failed`; a grader restarted
after a crash finds the rows it was working on still `queued`/`evaluating` and evaluates them again (up to a retry
limit, then marks them failed with the reason), so nothing is lost or counted twice. Baselines are keyed by
everything that determines them (benchmark, test set, eval config hash, base weights), so a cached baseline never
leaks into a run with a different config. `scores.json` is a mirror for people: written atomically, never read.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel

from tasks.atomic import atomic_write_json

Status = Literal["queued", "evaluating", "done", "failed"]

_SCHEMA = """
CREATE TABLE IF NOT EXISTS meta (key TEXT PRIMARY KEY, value TEXT NOT NULL);
CREATE TABLE IF NOT EXISTS baselines (
    key TEXT PRIMARY KEY,
    eval_config_hash TEXT NOT NULL,
    score REAL NOT NULL, public_score REAL, private_score REAL,
    n INTEGER NOT NULL, ci_low REAL NOT NULL, ci_high REAL NOT NULL,
    seconds REAL NOT NULL, created_at REAL NOT NULL,
    per_sample TEXT NOT NULL DEFAULT '[]'
);
CREATE TABLE IF NOT EXISTS submissions (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    model_path TEXT NOT NULL,
    content_hash TEXT,
    status TEXT NOT NULL,
    score REAL, public_score REAL, private_score REAL,
    n INTEGER, ci_low REAL, ci_high REAL,
    error TEXT,
    created_at REAL NOT NULL, started_at REAL, finished_at REAL,
    is_copy INTEGER NOT NULL DEFAULT 0,
    duplicate_of INTEGER,
    attempts INTEGER NOT NULL DEFAULT 0,
    per_sample TEXT
);
CREATE INDEX IF NOT EXISTS submissions_hash ON submissions(content_hash);
CREATE TABLE IF NOT EXISTS sketches (
    submission_id INTEGER PRIMARY KEY, layout TEXT NOT NULL, data BLOB NOT NULL
);
"""
# Columns added after the first release: (name, declaration). Added to older stores on open, never dropped.
_ADDED_COLUMNS = [
    ("submissions", "flags", "TEXT NOT NULL DEFAULT '[]'"),
    ("submissions", "snapshot", "TEXT"),
    ("submissions", "files_sha256", "TEXT"),
]


class Baseline(BaseModel):
    key: str
    eval_config_hash: str
    score: float
    public_score: float | None
    private_score: float | None
    n: int
    ci_low: float
    ci_high: float
    seconds: float
    created_at: float
    per_sample: str = "[]"  # JSON list of per-sample scores in evaluation order


class Submission(BaseModel):
    id: int
    model_path: str
    content_hash: str | None
    status: Status
    score: float | None = None  # on the whole test set (private until finalize when a public split is used)
    public_score: float | None = None
    private_score: float | None = None
    n: int | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    error: str | None = None
    created_at: float
    started_at: float | None = None
    finished_at: float | None = None
    is_copy: bool = False
    duplicate_of: int | None = None
    attempts: int = 0
    per_sample: str | None = None  # JSON list of per-sample scores in evaluation order (private)
    flags: str = "[]"  # JSON list of grader.contamination.Flag: why the submission is suspect (never best)
    snapshot: str | None = (
        None  # the grader's private copy, scored instead of the submitted folder (until done)
    )
    files_sha256: str | None = None  # digest of the copied files (sandbox.untrusted.tree_digest)

    @property
    def flag_list(self) -> list[dict[str, Any]]:
        return list(json.loads(self.flags or "[]"))

    @property
    def flagged(self) -> bool:
        return bool(self.flag_list)


class Store:
    """Thread-safe access to store.db; one connection guarded by a lock (evaluation is one at a time anyway)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._lock = threading.RLock()
        self._db = sqlite3.connect(str(path), check_same_thread=False, isolation_level=None, timeout=30)
        self._db.row_factory = sqlite3.Row
        self._db.execute("PRAGMA journal_mode=WAL")
        self._db.execute("PRAGMA synchronous=FULL")
        self._db.executescript(_SCHEMA)
        self._migrate()

    def _migrate(self) -> None:
        """Add the columns newer code expects to a store written by older code (backwards compatible)."""
        with self.transaction() as db:
            for table, column, declaration in _ADDED_COLUMNS:
                present = {row["name"] for row in db.execute(f"PRAGMA table_info({table})")}
                if column not in present:
                    db.execute(f"ALTER TABLE {table} ADD COLUMN {column} {declaration}")

    def close(self) -> None:
        with self._lock:
            self._db.close()

    @contextmanager
    def transaction(self) -> Iterator[sqlite3.Connection]:
        """BEGIN IMMEDIATE ... COMMIT under the store lock; rolled back on any error."""
        with self._lock:
            self._db.execute("BEGIN IMMEDIATE")
            try:
                yield self._db
            except BaseException:
                self._db.execute("ROLLBACK")
                raise
            self._db.execute("COMMIT")

    # --- meta -----------------------------------------------------------------------------------------------
    def get_meta(self, key: str) -> str | None:
        with self._lock:
            row = self._db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return None if row is None else str(row["value"])

    def set_meta(self, key: str, value: str, *, only_if_missing: bool = False) -> str:
        """Set `key` (or keep the stored value when `only_if_missing`); returns the value now stored."""
        with self.transaction() as db:
            verb = "INSERT OR IGNORE" if only_if_missing else "INSERT OR REPLACE"
            db.execute(f"{verb} INTO meta(key, value) VALUES (?, ?)", (key, value))
            row = db.execute("SELECT value FROM meta WHERE key = ?", (key,)).fetchone()
        return str(row["value"])

    # --- baselines ------------------------------------------------------------------------------------------
    def get_baseline(self, key: str) -> Baseline | None:
        with self._lock:
            row = self._db.execute("SELECT * FROM baselines WHERE key = ?", (key,)).fetchone()
        return None if row is None else Baseline.model_validate(dict(row))

    def put_baseline(self, baseline: Baseline) -> None:
        with self.transaction() as db:
            fields = baseline.model_dump()
            cols = ", ".join(fields)
            marks = ", ".join("?" for _ in fields)
            db.execute(f"INSERT OR REPLACE INTO baselines({cols}) VALUES ({marks})", tuple(fields.values()))

    # --- submissions ----------------------------------------------------------------------------------------
    def _row(self, db: sqlite3.Connection, submission_id: int) -> Submission:
        row = db.execute("SELECT * FROM submissions WHERE id = ?", (submission_id,)).fetchone()
        if row is None:
            raise KeyError(f"no submission {submission_id}")
        return Submission.model_validate(dict(row))

    def get(self, submission_id: int) -> Submission:
        with self._lock:
            return self._row(self._db, submission_id)

    def all(self) -> list[Submission]:
        with self._lock:
            rows = self._db.execute("SELECT * FROM submissions ORDER BY id").fetchall()
        return [Submission.model_validate(dict(r)) for r in rows]

    def insert(self, db: sqlite3.Connection, **fields: Any) -> Submission:
        """Insert a submission row inside an open transaction and return it."""
        fields.setdefault("created_at", time.time())
        cols = ", ".join(fields)
        marks = ", ".join("?" for _ in fields)
        cursor = db.execute(f"INSERT INTO submissions({cols}) VALUES ({marks})", tuple(fields.values()))
        return self._row(db, int(cursor.lastrowid or 0))

    def update(self, submission_id: int, **fields: Any) -> Submission:
        with self.transaction() as db:
            sets = ", ".join(f"{k} = ?" for k in fields)
            db.execute(f"UPDATE submissions SET {sets} WHERE id = ?", (*fields.values(), submission_id))
            return self._row(db, submission_id)

    def find_original(self, db: sqlite3.Connection, content_hash: str) -> Submission | None:
        """The earliest live (not failed) non-duplicate submission with these weights."""
        row = db.execute(
            "SELECT * FROM submissions WHERE content_hash = ? AND duplicate_of IS NULL AND status != 'failed' "
            "ORDER BY id LIMIT 1",
            (content_hash,),
        ).fetchone()
        return None if row is None else Submission.model_validate(dict(row))

    def counted(self, db: sqlite3.Connection) -> tuple[int, float | None]:
        """(number of submissions that use up the budget, creation time of the latest one)."""
        row = db.execute(
            "SELECT COUNT(*) AS n, MAX(created_at) AS last FROM submissions "
            "WHERE duplicate_of IS NULL AND content_hash IS NOT NULL"
        ).fetchone()
        return int(row["n"]), (None if row["last"] is None else float(row["last"]))

    def put_sketch(self, submission_id: int, layout: str, data: bytes) -> None:
        with self.transaction() as db:
            db.execute(
                "INSERT OR REPLACE INTO sketches(submission_id, layout, data) VALUES (?, ?, ?)",
                (submission_id, layout, data),
            )

    def sketches_before(self, submission_id: int, layout: str) -> dict[int, bytes]:
        """Weight sketches of earlier finished submissions with the same tensor layout."""
        with self._lock:
            rows = self._db.execute(
                "SELECT k.submission_id, k.data FROM sketches k JOIN submissions s ON s.id = k.submission_id "
                "WHERE k.submission_id < ? AND k.layout = ? AND s.status = 'done' ORDER BY k.submission_id",
                (submission_id, layout),
            ).fetchall()
        return {int(r["submission_id"]): bytes(r["data"]) for r in rows}

    def unfinished(self) -> list[Submission]:
        """Submissions a previous grader process accepted but never finished."""
        with self._lock:
            rows = self._db.execute(
                "SELECT * FROM submissions WHERE status IN ('queued', 'evaluating') AND duplicate_of IS NULL "
                "ORDER BY id"
            ).fetchall()
        return [Submission.model_validate(dict(r)) for r in rows]


def write_json_atomically(path: Path, data: Any) -> None:
    """The scores mirror and final.json: sorted keys, written atomically (readers see old or new, never half)."""
    atomic_write_json(path, data, sort_keys=True)
