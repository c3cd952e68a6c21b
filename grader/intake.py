"""How a submission comes in: the submitted folder copied into the grader's private folder (never following a link
the submitter made) and checked there; then recorded exactly once (limits, duplicate lookup, insert in one store
transaction, so concurrent requests are each recorded once) and queued for the evaluation worker
(`grader.service`). A refused submission is recorded as failed, with the reason."""

from __future__ import annotations

import shutil
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path

from grader.checkpoint import (
    BaseModelReference,
    CheckpointError,
    content_hash,
    inspect_checkpoint,
    locate_submission,
    snapshot_submission,
)
from grader.rejected import SubmissionRejected
from grader.standings import Standings
from grader.store import Submission


@dataclass(frozen=True)
class Received:
    """A submission the grader has copied and checked, not yet recorded: the path as sent (lexically
    normalised), the weights' content hash, its private copy and that copy's file digest."""

    model_path: str
    content_hash: str
    snapshot: Path
    files_sha256: str

    def discard(self) -> None:
        shutil.rmtree(self.snapshot, ignore_errors=True)


class Intake(Standings):
    """Taking submissions in, and the private copies they are scored from (the queue is `GraderService`'s)."""

    base_ref: BaseModelReference | None
    startup_error: str | None
    _accept_lock: threading.Lock
    _futures: dict[int, Future[Submission]]

    def _enqueue(self, submission_id: int) -> Future[Submission]:
        raise NotImplementedError  # the evaluation worker's queue: GraderService

    @property
    def snapshots_dir(self) -> Path:
        """Private copies of submissions waiting to be scored."""
        return self.private_dir / "submissions"

    def _take_snapshot(self, raw_path: str) -> tuple[str, Path, str]:
        """(path as sent, private copy, file digest) of a submitted folder (CheckpointError when refused)."""
        root, relative = locate_submission(raw_path, self.config.allowed_roots)
        self.snapshots_dir.mkdir(mode=0o700, exist_ok=True)
        dest = self.snapshots_dir / uuid.uuid4().hex
        digest = snapshot_submission(root, relative, dest, self.config.limits)
        return str(root / relative), dest, digest

    def _snapshot_of(self, sub: Submission) -> Path:
        """The private copy a submission is scored from; made again from the submitted folder when a previous
        process left none (a store from before copies, or a copy lost with its folder)."""
        if sub.snapshot and (self.private_dir / sub.snapshot).is_dir():
            return self.private_dir / sub.snapshot
        _, dest, digest = self._take_snapshot(sub.model_path)
        self.store.update(sub.id, snapshot=str(dest.relative_to(self.private_dir)), files_sha256=digest)
        return dest

    def _drop_snapshot(self, sub: Submission) -> None:
        current = self.store.get(sub.id).snapshot
        if current:
            shutil.rmtree(self.private_dir / current, ignore_errors=True)
            self.store.update(sub.id, snapshot=None)

    def check_open(self) -> None:
        if self.startup_error:
            raise SubmissionRejected(503, f"grader failed to start: {self.startup_error}")
        if not self.ready:
            raise SubmissionRejected(
                503, "grader is still scoring the baseline; retry when /health says ready"
            )
        if self.finalized():
            raise SubmissionRejected(409, "the run is finalized; no more submissions are accepted")

    def validate(self, raw_path: str) -> Received:
        """Copy the submitted folder into the grader's private folder (never following a link the submitter
        made) and check the copy; rejected submissions are recorded as failed, with the reason."""
        assert self.base_ref is not None
        dest: Path | None = None
        try:
            model_path, dest, files = self._take_snapshot(raw_path)
            info = inspect_checkpoint(dest, self.base_ref, self.config.limits)
            return Received(model_path, content_hash(info), dest, files)
        except CheckpointError as exc:
            if dest is not None:
                shutil.rmtree(dest, ignore_errors=True)
            with self.store.transaction() as db:
                row = self.store.insert(
                    db, model_path=raw_path[:4096], status="failed", error=str(exc), finished_at=time.time()
                )
            self.write_mirror()
            raise SubmissionRejected(400, str(exc), row.id) from None

    def accept(self, received: Received) -> tuple[Submission, Future[Submission] | None]:
        """Record the submission (or a duplicate of an earlier one) exactly once; returns what to wait for."""
        try:
            accepted = self._accept(received)
        except BaseException:
            received.discard()
            raise
        if accepted[0].duplicate_of is not None:
            received.discard()  # scored already, as the original
        self.write_mirror()
        return accepted

    def _accept(self, received: Received) -> tuple[Submission, Future[Submission] | None]:
        cfg = self.config
        resolved, digest = received.model_path, received.content_hash
        with self._accept_lock, self.store.transaction() as db:
            if self.finalized():
                raise SubmissionRejected(409, "the run is finalized; no more submissions are accepted")
            original = self.store.find_original(db, digest)
            if original is not None:
                dup = self.store.insert(
                    db,
                    model_path=resolved,
                    content_hash=digest,
                    files_sha256=received.files_sha256,
                    status="done",
                    duplicate_of=original.id,
                    finished_at=time.time(),
                )
                return dup, self._futures.get(original.id)
            count, last = self.store.counted(db)
            if cfg.max_submissions is not None and count >= cfg.max_submissions:
                raise SubmissionRejected(
                    429, f"submission limit reached ({cfg.max_submissions}); no more submissions in this run"
                )
            now = time.time()
            if last is not None and now - last < cfg.min_interval_s:
                wait = cfg.min_interval_s - (now - last)
                raise SubmissionRejected(
                    429, f"submissions must be {cfg.min_interval_s:g}s apart; retry in {wait:.1f}s"
                )
            sub = self.store.insert(
                db,
                model_path=resolved,
                content_hash=digest,
                snapshot=str(received.snapshot.relative_to(self.private_dir)),
                files_sha256=received.files_sha256,
                status="queued",
                created_at=now,
            )
            return sub, self._enqueue(sub.id)
