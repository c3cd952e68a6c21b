"""The grading service behind the HTTP API: the baseline, and one worker thread that evaluates queued submissions in
order, one at a time (with the integrity checks, which flag a submission and never fail it).

All state lives in the store (SQLite), so the service can die at any moment and come back with every submission
(`_recover` queues again what a previous process left unfinished). How a submission comes in: `grader.intake`; what
the grader answers about them, finalize included: `grader.standings`.
"""

from __future__ import annotations

import hashlib
import json
import logging
import queue
import threading
import time
from concurrent.futures import Future
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
    weights_fingerprint,
)
from grader.config import GraderConfig, pin_chat
from grader.contamination import Flag, TestItemIndex, flags_json, integrity_flags
from grader.evaluation import EvalResult, evaluate_model, select_samples
from grader.intake import Intake
from grader.stats import ScoreSummary, summarize
from grader.store import Baseline, Store, Submission
from sandbox.devices import gpu_lease, visible_gpu_ids

log = logging.getLogger("grader")


def public_ids(sample_ids: list[str], fraction: float | None, seed: int) -> set[str]:
    """Kaggle-style public part of the test set: a fixed, seeded share of the samples (at least one each side)."""
    if not fraction or len(sample_ids) < 2:
        return set(sample_ids)
    ranked = sorted(sample_ids, key=lambda i: hashlib.sha256(f"{seed}:{i}".encode()).hexdigest())
    k = min(len(ranked) - 1, max(1, round(fraction * len(ranked))))
    return set(ranked[:k])


class GraderService(Intake):
    """Owns the store, the base model reference, the test samples and the evaluation worker; takes submissions in
    (`Intake`) and reports on them (`Standings`)."""

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

    def _weakest_isolation(self, now: str) -> str:
        """The run's isolation over all its starts: once any attempt trained unisolated, its scores say so for
        good (a resumed run on a better sandbox cannot wash the earlier submissions clean)."""
        rank = {"none": 0, "unknown": 1}
        before = self.store.get_meta("isolation")
        level = now if before is None or rank.get(now, 2) < rank.get(before, 2) else before
        return self.store.set_meta("isolation", level)
