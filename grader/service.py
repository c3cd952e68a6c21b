"""The grading service behind the HTTP API: baseline, submission queue, one-at-a-time evaluation, finalize.

All state lives in the store (SQLite), so the service can die at any moment and come back with every submission.
Accepting a submission (limits, duplicate lookup, insert) happens in one store transaction, so concurrent requests
are each recorded exactly once; one worker thread evaluates queued submissions in order.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import shutil
import threading
import time
import uuid
from concurrent.futures import Future
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from grader.benchmarks import Benchmark, Sample, get_benchmark
from grader.benchmarks.registry import write_jsonl
from grader.benchmarks.secret import run_test_seed
from grader.checkpoint import (
    BaseModelReference,
    CheckpointError,
    chat_template_flag,
    content_hash,
    inspect_checkpoint,
    load_checkpoint,
    load_model,
    locate_submission,
    snapshot_submission,
    weights_fingerprint,
)
from grader.config import GraderConfig, pin_chat
from grader.contamination import Flag, TestItemIndex, flags_json, integrity_flags
from grader.contract import (
    BestSubmission,
    FinalizeAnswer,
    FlaggedSubmission,
    PrivateScore,
    SubmitAnswer,
    TrajectoryPoint,
)
from grader.evaluation import EvalResult, evaluate_model, select_samples
from grader.figures import run_figures
from grader.stats import ScoreSummary, summarize
from grader.store import Baseline, Store, Submission, write_json_atomically
from sandbox.devices import gpu_lease, visible_gpu_ids

log = logging.getLogger("grader")


class SubmissionRejected(Exception):
    """A request the service refuses; `status_code` is the HTTP status, the message is safe to return."""

    def __init__(self, status_code: int, reason: str, submission_id: int | None = None) -> None:
        super().__init__(reason)
        self.status_code = status_code
        self.reason = reason
        self.submission_id = submission_id


def public_ids(sample_ids: list[str], fraction: float | None, seed: int) -> set[str]:
    """Kaggle-style public part of the test set: a fixed, seeded share of the samples (at least one each side)."""
    if not fraction or len(sample_ids) < 2:
        return set(sample_ids)
    ranked = sorted(sample_ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    k = min(len(ranked) - 1, max(1, round(fraction * len(ranked))))
    return set(ranked[:k])


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


class GraderService:
    """Owns the store, the base model reference, the test samples and the evaluation worker."""

    def __init__(self, config: GraderConfig) -> None:
        self.config = config
        self.private_dir = config.private_dir.resolve()
        self.private_dir.mkdir(parents=True, exist_ok=True)
        self.private_dir.chmod(0o700)
        self.store = Store(self.private_dir / "store.db")
        self.started_at = float(self.store.set_meta("started_at", repr(time.time()), only_if_missing=True))
        self.isolation = self._weakest_isolation(config.isolation)
        self.ready = False
        self.startup_error: str | None = None
        self.baseline: Baseline | None = None
        self._queue: queue.Queue[int | None] = queue.Queue()
        self._futures: dict[int, Future[Submission]] = {}
        self._accept_lock = threading.Lock()
        self._worker: threading.Thread | None = None
        self._stopping = threading.Event()
        self.benchmark: Benchmark | None = None
        self.samples: list[Sample] = []
        self.public: set[str] = set()
        self.base_ref: BaseModelReference | None = None
        self.base_fingerprint = ""
        self.tokenizer: Any = None
        self.test_index: TestItemIndex | None = None  # hidden test items, for the contamination scan

    # --- lifecycle --------------------------------------------------------------------------------------------
    def start(self) -> None:
        """Score the baseline, requeue what a previous process left unfinished, start the worker; then ready."""
        try:
            if self.config.torch_threads:
                torch.set_num_threads(self.config.torch_threads)
            self._prepare()
            self._recover()
            self._worker = threading.Thread(target=self._work, name="grader-worker", daemon=True)
            self._worker.start()
            self.write_mirror()
            self.ready = True
            log.info("ready: baseline %.4f on %d samples", self.reported_baseline(), len(self.samples))
        except Exception as exc:  # noqa: BLE001 - reported through /health and the log
            self.startup_error = f"{type(exc).__name__}: {exc}".splitlines()[0]
            log.exception("grader failed to start")

    def stop(self) -> None:
        self._stopping.set()
        self._queue.put(None)
        if self._worker is not None:
            self._worker.join(timeout=5)
        self.store.close()

    def _prepare(self) -> None:
        from transformers import AutoTokenizer

        cfg = self.config
        self.benchmark = get_benchmark(cfg.benchmark, run_test_seed(self.private_dir, cfg.test_seed))
        test = self.benchmark.load("test")
        write_jsonl(self.private_dir / "test.jsonl", test)
        self.samples = select_samples(test, cfg.eval)
        ids = [s.id for s in self.samples]
        self.public = public_ids(ids, cfg.public_fraction, cfg.split_seed)
        self.test_index = TestItemIndex.for_benchmark(self.benchmark, self.samples, cfg.integrity.ngram)
        self.base_ref = BaseModelReference.read(cfg.base_model.resolve())
        self.tokenizer = AutoTokenizer.from_pretrained(str(self.base_ref.path), trust_remote_code=False)
        # chat prompts: the base template's hash and stop tokens join the eval identity (and so the baseline's key)
        self.config = cfg = cfg.model_copy(update={"eval": pin_chat(cfg.eval, self.tokenizer)})
        base_model = load_model(self.base_ref.path)
        self.base_fingerprint = weights_fingerprint(base_model)
        test_hash = hashlib.sha256(
            json.dumps([[s.id, s.prompt, s.answer] for s in self.samples]).encode()
        ).hexdigest()
        key_parts = [cfg.benchmark, test_hash, cfg.eval.identity(), self.base_fingerprint]
        key_parts += [repr(cfg.public_fraction), str(cfg.split_seed)]
        key = hashlib.sha256("|".join(key_parts).encode()).hexdigest()
        self.baseline = self.store.get_baseline(key)
        if self.baseline is None:
            log.info(
                "scoring the baseline (%d samples, eval config %s)", len(self.samples), cfg.eval.identity()
            )
            result = self._evaluate(base_model)
            public, private = self._split_summaries(result.scores)
            self.baseline = Baseline(
                key=key,
                eval_config_hash=cfg.eval.identity(),
                score=result.score,
                public_score=public.score,
                private_score=private.score if private else None,
                n=public.n,
                ci_low=public.ci_low,
                ci_high=public.ci_high,
                seconds=result.seconds,
                created_at=time.time(),
                per_sample=json.dumps(result.scores),
            )
            self.store.put_baseline(self.baseline)
        else:
            log.info("baseline found in the store for eval config %s", cfg.eval.identity())
        del base_model

    def _recover(self) -> None:
        for sub in self.store.unfinished():
            if sub.attempts > self.config.max_crash_retries:
                reason = (
                    f"the grader stopped {sub.attempts} times while evaluating this submission; not retried"
                )
                self.store.update(sub.id, status="failed", error=reason, finished_at=time.time())
                log.warning("submission %d failed after restart: %s", sub.id, reason)
                continue
            log.info("re-queueing submission %d left %s by a previous grader process", sub.id, sub.status)
            self.store.update(sub.id, status="queued")
            self._enqueue(sub.id)

    # --- evaluation -------------------------------------------------------------------------------------------
    def _evaluate(self, model: Any) -> EvalResult:
        """Score a loaded (already validated, adapter-merged) model; vLLM gets a clean re-saved copy of it."""
        assert self.benchmark is not None and self.base_ref is not None
        if not torch.cuda.is_available():
            return self._evaluate_on_device(model)
        # One user of a GPU at a time: a trial training on this device finishes first (and waits for us in turn).
        with gpu_lease(visible_gpu_ids(1), holder=f"the grader of run {self.config.run_id}"):
            return self._evaluate_on_device(model)

    def _evaluate_on_device(self, model: Any) -> EvalResult:
        assert self.benchmark is not None
        return evaluate_model(
            model,
            self.tokenizer,
            self.samples,
            self.benchmark,
            self.config.eval,
            scratch_parent=self.private_dir,
        )

    def _split_summaries(self, scores: list[float]) -> tuple[ScoreSummary, ScoreSummary | None]:
        """(public or whole-test summary, private summary or None when there is no public/private split)."""
        ev = self.config.eval
        if not self.config.split_enabled:
            return summarize(scores, resamples=ev.bootstrap_resamples, seed=ev.seed), None
        pub = [x for s, x in zip(self.samples, scores, strict=True) if s.id in self.public]
        priv = [x for s, x in zip(self.samples, scores, strict=True) if s.id not in self.public]
        return (
            summarize(pub, resamples=ev.bootstrap_resamples, seed=ev.seed),
            summarize(priv, resamples=ev.bootstrap_resamples, seed=ev.seed),
        )

    def _enqueue(self, submission_id: int) -> Future[Submission]:
        future: Future[Submission] = Future()
        self._futures[submission_id] = future
        self._queue.put(submission_id)
        return future

    def _work(self) -> None:
        while not self._stopping.is_set():
            submission_id = self._queue.get()
            if submission_id is None:
                return
            try:
                result = self._run_one(submission_id)
            except Exception as exc:  # noqa: BLE001 - never let one submission kill the worker
                log.exception("submission %d failed unexpectedly", submission_id)
                result = self.store.update(
                    submission_id,
                    status="failed",
                    error=f"internal error during evaluation ({type(exc).__name__})",
                    finished_at=time.time(),
                )
            self.write_mirror()
            future = self._futures.pop(submission_id, None)
            if future is not None:
                future.set_result(result)

    def _run_one(self, submission_id: int) -> Submission:
        assert self.base_ref is not None and self.baseline is not None
        sub = self.store.get(submission_id)
        sub = self.store.update(
            submission_id, status="evaluating", started_at=time.time(), attempts=sub.attempts + 1
        )
        log.info("evaluating submission %d (attempt %d)", sub.id, sub.attempts)
        try:
            copy = self._snapshot_of(sub)
            info = inspect_checkpoint(copy, self.base_ref, self.config.limits)
            if content_hash(info) != sub.content_hash:  # a copy made again after a restart: same weights only
                raise CheckpointError(
                    "checkpoint files changed after submission; submit the final checkpoint again"
                )
            model = load_checkpoint(info, self.base_ref.path)
        except CheckpointError as exc:
            self._drop_snapshot(sub)
            return self.store.update(submission_id, status="failed", error=str(exc), finished_at=time.time())
        is_copy = weights_fingerprint(model) == self.base_fingerprint
        flags = self._integrity(sub, model)
        own_template = chat_template_flag(info, self.base_ref)
        if own_template:
            log.warning("submission %d flagged (chat_template): %s", sub.id, own_template)
            flags.append(Flag(check="chat_template", evidence=own_template))
        if is_copy:
            scores = json.loads(self.baseline.per_sample)
            full = sum(scores) / len(scores)
        else:
            result = self._evaluate(model)
            scores, full = result.scores, result.score
        del model
        self._drop_snapshot(sub)
        public, private = self._split_summaries(scores)
        done = self.store.update(
            submission_id,
            status="done",
            score=full,
            public_score=public.score,
            private_score=private.score if private else full,
            n=public.n,
            ci_low=public.ci_low,
            ci_high=public.ci_high,
            is_copy=int(is_copy or any(f.check == "base_copy" for f in flags)),
            flags=flags_json(flags),
            per_sample=json.dumps(scores),
            finished_at=time.time(),
        )
        log.info(
            "submission %d done: score %.4f%s", done.id, public.score, " (copy of base)" if is_copy else ""
        )
        return done

    def _integrity(self, sub: Submission, model: Any) -> list[Flag]:
        """Contamination, copy and near-duplicate checks; they flag a submission, they never fail it."""
        assert self.base_ref is not None
        state = model.state_dict()
        flags, (layout, sketch) = integrity_flags(
            index=self.test_index,
            config=self.config.integrity,
            checkpoint=Path(sub.model_path),
            allowed_roots=self.config.allowed_roots,
            state=state,
            base_weight_files=sorted(self.base_ref.path.glob("*.safetensors")),
            earlier_sketches=lambda key: self.store.sketches_before(sub.id, key),
        )
        self.store.put_sketch(sub.id, layout, sketch)
        for flag in flags:
            log.warning("submission %d flagged (%s): %s", sub.id, flag.check, flag.evidence)
        return flags

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

    # --- accepting submissions --------------------------------------------------------------------------------
    def finalized(self) -> bool:
        return self.store.get_meta("finalized_at") is not None

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

    # --- views ------------------------------------------------------------------------------------------------
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

    def _weakest_isolation(self, now: str) -> str:
        """The run's isolation over all its starts: once any attempt trained unisolated, its scores say so for
        good (a resumed run on a better sandbox cannot wash the earlier submissions clean)."""
        rank = {"none": 0, "unknown": 1}
        before = self.store.get_meta("isolation")
        level = now if before is None or rank.get(now, 2) < rank.get(before, 2) else before
        return self.store.set_meta("isolation", level)

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
