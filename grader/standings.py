"""What the grader answers about a run's submissions, from its store: the baseline it reports, the best, each
submission's public view (/scores; private scores only once the run is finalized), a /submit answer, and finalize
(private scores revealed, the final best picked on public and reported by the one score rule, `grader.figures`).
`GraderService` (`grader.service`) is built on this; the submissions come in through `grader.intake`."""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from grader.config import GraderConfig
from grader.contract import (
    BestSubmission,
    FinalizeAnswer,
    FlaggedSubmission,
    PrivateScore,
    SubmitAnswer,
    TrajectoryPoint,
)
from grader.figures import run_figures
from grader.rejected import SubmissionRejected
from grader.store import Baseline, Store, Submission, write_json_atomically

log = logging.getLogger("grader")


class Standings:
    """A run's submissions as the grader reports them (the state is `GraderService`'s)."""

    config: GraderConfig
    store: Store
    private_dir: Path
    started_at: float
    isolation: str
    ready: bool
    baseline: Baseline | None

    def finalized(self) -> bool:
        return self.store.get_meta("finalized_at") is not None

    def elapsed(self, at: float | None = None) -> float:
        return max(0.0, (at if at is not None else time.time()) - self.started_at)

    def reported_baseline(self) -> float:
        assert self.baseline is not None
        return float(
            self.baseline.public_score if self.baseline.public_score is not None else self.baseline.score
        )

    def best(self) -> Submission | None:
        """Best finished, unflagged submission by its reported (public) score; the earliest wins ties."""
        done = [
            s for s in self.store.all() if s.status == "done" and s.duplicate_of is None and not s.flagged
        ]
        return max(done, key=lambda s: (s.public_score or 0.0, -s.id), default=None)

    def public_view(self, sub: Submission, *, reveal: bool) -> dict[str, Any]:
        """What /scores shows of a submission; private scores only once the run is finalized."""
        source = sub
        if sub.duplicate_of is not None:
            source = self.store.get(sub.duplicate_of)
        view: dict[str, Any] = {
            "submission_id": sub.id,
            "model_path": sub.model_path,
            "status": source.status if sub.duplicate_of is not None else sub.status,
            "score": source.public_score,
            "n": source.n,
            "ci_low": source.ci_low,
            "ci_high": source.ci_high,
            "is_copy": bool(source.is_copy),
            "duplicate_of": sub.duplicate_of,
            "files_sha256": sub.files_sha256,
            "flagged": source.flagged,
            "flags": source.flag_list,
            "isolation": self.isolation,
            "error": sub.error or (source.error if sub.duplicate_of is not None else None),
            "created_at": sub.created_at,
            "elapsed_seconds": round(self.elapsed(sub.created_at), 3),
            "finished_at": sub.finished_at,
        }
        if reveal:
            view["private_score"] = source.private_score
            view["full_test_score"] = source.score
        return view

    def scores(self) -> dict[str, Any]:
        reveal = self.finalized()
        baseline: dict[str, Any] | None = None
        if self.baseline is not None:
            baseline = {
                "score": self.reported_baseline(),
                "n": self.baseline.n,
                "ci_low": self.baseline.ci_low,
                "ci_high": self.baseline.ci_high,
            }
            if reveal:
                baseline["private_score"] = self.baseline.private_score
        best = self.best()
        return {
            "run_id": self.config.run_id,
            "benchmark": self.config.benchmark,
            "finalized": reveal,
            "isolation": self.isolation,
            "public_private_split": self.config.split_enabled,
            "baseline": baseline,
            "best": {"submission_id": best.id, "score": best.public_score} if best else None,
            "submissions": [self.public_view(s, reveal=reveal) for s in self.store.all()],
        }

    def write_mirror(self) -> None:
        if self.config.scores_mirror is None:
            return
        try:
            write_json_atomically(self.config.scores_mirror, self.scores())
        except OSError as exc:
            log.warning("could not write the scores mirror %s: %s", self.config.scores_mirror, exc.strerror)

    def submit_response(self, sub: Submission) -> SubmitAnswer:
        """The AutoRL-Bench-compatible /submit answer for a finished submission (or its duplicate)."""
        source = self.store.get(sub.duplicate_of if sub.duplicate_of is not None else sub.id)
        if source.status == "failed":
            raise SubmissionRejected(422, f"evaluation failed: {source.error}", sub.id)
        counted = sum(1 for s in self.store.all() if s.duplicate_of is None and s.content_hash is not None)
        best = self.best()
        baseline = self.reported_baseline()
        score = float(source.public_score or 0.0)
        remaining = (
            None if self.config.max_submissions is None else max(0, self.config.max_submissions - counted)
        )
        return SubmitAnswer(
            submission_id=sub.id,
            score=score,
            baseline_score=baseline,
            improvement=score - baseline,
            best=BestSubmission(submission_id=best.id, score=best.public_score) if best else None,
            total_submissions=counted,
            elapsed_seconds=round(self.elapsed(), 3),
            remaining_submissions=remaining,
            n=source.n,
            ci_low=source.ci_low,
            ci_high=source.ci_high,
            duplicate_of=sub.duplicate_of,
            files_sha256=sub.files_sha256,  # of the files scored (this submission's own copy of them)
            isolation=self.isolation,
            is_copy=bool(source.is_copy),
            flagged=source.flagged,
            flags=source.flag_list,
            status=source.status,
        )

    # --- finalize ---------------------------------------------------------------------------------------------
    def finalize(self) -> FinalizeAnswer:
        """End the run: reveal private scores, pick the final best on public, report it on private.

        `reported` holds the run's figures by the one score rule (`grader.figures`): the private pair when the test
        set is split, the public pair otherwise; with no unflagged submission, best = baseline and improvement 0.0
        (on both parts, so `final_private_score` is then the private baseline)."""
        if not self.ready or self.baseline is None:
            raise SubmissionRejected(503, "grader is not ready; finalize after /health says ready")
        self.store.set_meta("finalized_at", repr(time.time()), only_if_missing=True)
        subs = self.store.all()
        originals = [s for s in subs if s.duplicate_of is None]
        done = [s for s in originals if s.status == "done"]
        best = self.best()
        baseline_public = self.reported_baseline()
        baseline_private = (
            self.baseline.private_score if self.baseline.private_score is not None else baseline_public
        )
        public = run_figures(baseline_public, float(best.public_score or 0.0) if best else None, "public")
        private = run_figures(baseline_private, float(best.private_score or 0.0) if best else None, "private")
        reported = private if self.config.split_enabled else public
        trajectory = [
            TrajectoryPoint(
                submission_id=s.id, elapsed_seconds=round(self.elapsed(s.created_at), 3), score=s.public_score
            )
            for s in done
        ]
        metrics = FinalizeAnswer(
            run_id=self.config.run_id,
            benchmark=self.config.benchmark,
            isolation=self.isolation,
            finalized_at=float(self.store.get_meta("finalized_at") or 0.0),
            total_submissions=len(originals),
            valid_submissions=len(done),
            valid_submission_rate=(len(done) / len(originals)) if originals else 0.0,
            duplicate_count=len(subs) - len(originals),
            copy_model_count=sum(1 for s in done if s.is_copy),
            flagged_submissions=[
                FlaggedSubmission(submission_id=s.id, flags=s.flag_list) for s in done if s.flagged
            ],
            score_trajectory=trajectory,
            baseline_score=public.baseline,
            best_submission_id=best.id if best else None,
            best_files_sha256=best.files_sha256 if best else None,  # what the host checks its best against
            best_score=public.best,
            improvement=public.improvement,
            time_to_best=round(self.elapsed(best.created_at), 3) if best else None,
            baseline_private_score=private.baseline,
            final_private_score=private.best,
            private_improvement=private.improvement,
            private_scores=[PrivateScore(submission_id=s.id, private_score=s.private_score) for s in done],
            public_private_split=self.config.split_enabled,
            reported=reported,
        )
        write_json_atomically(self.private_dir / "final.json", metrics.model_dump(mode="json"))
        self.write_mirror()
        log.info("finalized: best %s", metrics.best_submission_id)
        return metrics
