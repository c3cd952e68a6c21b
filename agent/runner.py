"""One research run: the live resources behind the graph's nodes, and the driver that runs, pauses and resumes it."""

from __future__ import annotations

import json
import os
import signal
import sqlite3
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from types import FrameType
from typing import Any, cast

import httpx
from langchain_core.runnables import RunnableConfig
from langgraph.checkpoint.sqlite import SqliteSaver
from langgraph.types import Command, interrupt

from agent import approvals
from agent.config import RunConfig
from agent.grading import GraderError, GraderProcess
from agent.graph import LoopState, build_graph
from agent.leftovers import end_leftovers
from agent.llm.budget import Budget, BudgetLimits
from agent.llm.errors import LLMBudgetExhaustedError, LLMUnavailableError
from agent.models import resolve_base_model
from agent.proposers import make_proposer
from agent.proposers.base import Proposal, ProposalContext, Proposer, TrialRecord
from agent.reporting import Reporter, append_result_row, flagged_report, plot_scores, submission_flags
from agent.tracking import Tracker
from agent.trials import TrialSetupError, outcome, prepare_trial, python_for, sandbox_request
from agent.workspace import RunPaths, atomic_write_json, ensure_home, new_run_id, prepare_workspace
from grader.benchmarks import get_benchmark
from sandbox.base import Sandbox
from sandbox.registry import isolation_of

FINISH_RESERVE_S = 20.0  # budget kept back for the final grading and bookkeeping


def failpoint(name: str, index: int | None = None) -> None:
    """Crash-test hook: `RLLOOP_FAILPOINT=run_trial:2` kills this process with SIGKILL at that point of trial 2,
    exactly like `kill -9` would. Unset in normal use; the resume tests use it to crash at every node."""
    target = os.environ.get("RLLOOP_FAILPOINT")
    if not target:
        return
    where, _, trial = target.partition(":")
    if where == name and (not trial or index is None or int(trial) == index):
        os.kill(os.getpid(), signal.SIGKILL)


class RunInterrupted(KeyboardInterrupt):
    """Ctrl-C or SIGTERM: stop children, keep everything written so far."""


def make_budget(config: RunConfig, ledger: Path | None = None) -> Budget:
    return Budget(
        BudgetLimits(
            max_usd=config.llm_max_usd, max_tokens=config.llm_max_tokens, max_compute_s=config.max_compute_s
        ),
        ledger=ledger,
    )


def make_sandbox(config: RunConfig, reporter: Reporter) -> Sandbox:
    """The configured backend (chosen in `sandbox.registry`, the one place that decides). A run that trains
    unisolated says so once, here, and carries `isolation=none` everywhere its numbers go."""
    from sandbox.registry import get_sandbox

    sandbox = get_sandbox(config.sandbox)
    if isolation_of(sandbox) == "none":
        why = getattr(sandbox, "isolation_reason", "") or "the backend does not isolate trials"
        reporter.warn(
            f"trials run in the {sandbox.name} sandbox WITHOUT isolation ({why}); every score of this run is "
            "marked isolation=none"
        )
    return sandbox


class Research:
    """Implements the loop's nodes over one run's workspace, grader, sandbox, proposer and MLflow parent run."""

    def __init__(
        self,
        config: RunConfig,
        paths: RunPaths,
        reporter: Reporter,
        proposer: Proposer,
        sandbox: Sandbox,
        budget: Budget | None = None,
    ) -> None:
        self.config = config
        self.budget = budget or make_budget(config, paths.budget_ledger)
        self.paths = paths
        self.reporter = reporter
        self.proposer = proposer
        self.sandbox = sandbox
        self.benchmark = get_benchmark(config.benchmark)
        self.base_model: Path = Path()
        self.tracker = Tracker(config.tracking_uri, config.home / "mlartifacts")
        self._grader: GraderProcess | None = None
        self._mark = time.monotonic()
        self.grader_start_s = 0.0  # wall seconds spent starting the grader (model load + baseline)
        self.graph: Any = None
        self.thread: RunnableConfig | None = None

    def last_state(self) -> LoopState:
        """The last checkpointed state (empty before the graph's first step)."""
        if self.graph is None or self.thread is None:
            return cast(LoopState, {})
        return cast(LoopState, self.graph.get_state(self.thread).values)

    # ---- resources ---------------------------------------------------------------------------------------------
    @property
    def grader(self) -> GraderProcess:
        """The run's grading server, (re)started on demand: after a resume it comes back with its whole store."""
        if self._grader is None or self._grader.proc is None or self._grader.proc.poll() is not None:
            grader = GraderProcess.load_or_create(
                self.paths,
                benchmark=self.config.benchmark,
                base_model=self.base_model,
                max_submissions=self.config.max_submissions or self.config.loop_n + 1,
                min_interval_s=self.config.min_submit_interval,
                public_fraction=self.config.public_fraction,
                eval_limit=self.config.eval_limit,
                eval_batch_size=self.config.eval_batch_size,
                test_seed=self.config.test_seed,
                isolation=isolation_of(self.sandbox),
            )
            started = time.monotonic()
            with self.reporter.watching("starting the grading server and scoring the baseline"):
                grader.start()
            self.grader_start_s += time.monotonic() - started
            self._grader = grader
        return self._grader

    def close(self) -> None:
        if self._grader is not None:
            self._grader.stop()

    def used_s(self, state: LoopState) -> float:
        return float(state.get("used_s", 0.0)) + (time.monotonic() - self._mark)

    def _spend(self, state: LoopState) -> float:
        used = self.used_s(state)
        self._mark = time.monotonic()
        return used

    def trials(self, state: LoopState) -> list[TrialRecord]:
        return [TrialRecord.model_validate(t) for t in state.get("trials", [])]

    # ---- routing -----------------------------------------------------------------------------------------------
    def stop_reason(self, state: LoopState) -> str | None:
        if state.get("status") == "terminated":
            return "terminated by a reviewer"
        if state.get("halt"):
            return str(state["halt"])
        exhausted = self.budget.exhausted()
        if exhausted:
            return f"budget spent: {exhausted}"
        if len(state.get("trials", [])) >= self.config.loop_n:
            return f"ran all {self.config.loop_n} trials"
        if self.used_s(state) >= self.config.timeout - FINISH_RESERVE_S:
            return f"time budget of {self.config.timeout:.0f}s spent"
        cap = self.config.max_submissions or self.config.loop_n + 1
        if state.get("submissions", 0) >= cap:
            return f"submission cap of {cap} reached"
        return None

    def needs_approval(self, state: LoopState) -> bool:
        proposal = Proposal.model_validate((state.get("current") or {})["proposal"])
        return approvals.policy_requires(self.config.approval, proposal, self.config.approval_budget_s)

    # ---- nodes -------------------------------------------------------------------------------------------------
    def prepare(self, state: LoopState) -> dict[str, Any]:
        baseline = self.grader.get("/scores").get("baseline") or {}
        score = baseline["score"]
        parent = self.tracker.start_parent(
            self.paths.run_id,
            self.config.benchmark,
            {
                **self.config.model_dump(mode="json", exclude={"home"}),
                "proposer": self.proposer.name,
                "sandbox_backend": self.sandbox.name,
                "isolation": isolation_of(self.sandbox),
                "base_model_path": str(self.base_model),
            },
        )
        self.tracker.log_metrics(parent, {"baseline_score": float(score)}, step=0)
        ci = baseline.get("ci_low"), baseline.get("ci_high")
        ci_text = f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" if None not in ci else ""
        self.reporter.info(
            f"[bold]baseline[/bold] {score:.3f} on the hidden test set (n={baseline.get('n', '?')}{ci_text})"
        )
        return {
            "baseline_score": float(score),
            "baseline": baseline,
            "best_score": None,
            "best_trial_id": None,
            "trials": [],
            "current": None,
            "submissions": 0,
            "scores": [],
            "mlflow_parent": parent,
            "status": "running",
            "timings": {"grader_start_s": round(self.grader_start_s, 3)},
            "used_s": self._spend(state),
        }

    def propose(self, state: LoopState) -> dict[str, Any]:
        trials = self.trials(state)
        index = len(trials) + 1
        trial_id = f"t{index:02d}"
        cap = self.config.max_submissions or self.config.loop_n + 1
        context = ProposalContext(
            run_id=self.paths.run_id,
            benchmark=self.config.benchmark,
            benchmark_description=self.benchmark.description,
            base_model=self.config.base_model,
            baseline_score=state.get("baseline_score"),
            best_score=state.get("best_score"),
            best_trial_id=state.get("best_trial_id"),
            trials=trials,
            trials_left=self.config.loop_n - len(trials),
            seconds_left=max(0.0, self.config.timeout - FINISH_RESERVE_S - self.used_s(state)),
            submissions_left=cap - state.get("submissions", 0),
            recipes=_recipes(self.config.recipes),
            seed=self.config.seed,
            feedback=state.get("feedback"),
            workspace=str(self.paths.workspace),
            base_model_path=str(self.base_model),
        )
        failpoint("propose", index)
        try:
            proposal = self.proposer.propose(context)
        except (
            LLMUnavailableError,
            LLMBudgetExhaustedError,
        ) as exc:  # nothing more can be proposed: end cleanly
            self.reporter.error(f"{exc}")
            return {"current": None, "halt": f"proposer unavailable: {exc}"}
        except Exception as exc:  # a bad proposal is a failed trial, not a crashed run
            self.reporter.error(f"{trial_id}: the {self.proposer.name} proposer failed: {exc}")
            failed = TrialRecord(
                trial_id=trial_id,
                index=index,
                proposal=Proposal(hypothesis="(no proposal)", recipe="none"),
                status="failed",
                error=f"proposer failed: {exc}"[:500],
            )
            return {"current": failed.model_dump(mode="json"), "feedback": None}
        hp = ", ".join(
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in proposal.hyperparameters.items()
        )
        start = proposal.init_from or "base model"
        self.reporter.info(f"[bold cyan]{trial_id}[/bold cyan] {proposal.recipe} from {start}: {hp}")
        self.reporter.info(f"    [dim]{proposal.hypothesis}[/dim]")
        record = TrialRecord(trial_id=trial_id, index=index, proposal=proposal, status="pending")
        return {"current": record.model_dump(mode="json"), "feedback": None}

    def approve(self, state: LoopState) -> dict[str, Any]:
        record = TrialRecord.model_validate(state["current"])
        approvals.publish_pending(self.paths.run_dir, record)
        decision = approvals.Decision.model_validate(
            interrupt({"run_id": self.paths.run_id, "trial": record.model_dump(mode="json")})
        )
        approvals.clear_pending(self.paths.run_dir, record.trial_id)
        update: dict[str, Any] = {}
        if decision.action == "terminate":
            record.status = "rejected"
            record.error = f"run terminated by {decision.by}: {decision.reason or 'no reason given'}"
            update["status"] = "terminated"
        elif decision.action == "reject":
            record.status = "rejected"
            record.error = f"rejected by {decision.by}: {decision.reason or 'no reason given'}"
            update["feedback"] = decision.reason or "rejected"
        else:
            record.proposal = decision.apply(record.proposal)
        record.approval = decision.model_dump(mode="json")
        self.reporter.info(f"    {record.trial_id} {decision.action}d by {decision.by}")
        update["current"] = record.model_dump(mode="json")
        return update

    def run_trial(self, state: LoopState) -> dict[str, Any]:
        record = TrialRecord.model_validate(state["current"])
        trials = self.trials(state)
        started = time.time()
        if record.proposal.train_py:
            problem = self.check_and_repair(record, trials, state)
            if problem is not None:
                record.status, record.error = "failed", problem
                record.duration_s = round(time.time() - started, 2)
                self.reporter.error(f"{record.trial_id}: {problem}")
                return {"current": record.model_dump(mode="json")}
        try:
            command = prepare_trial(
                record.proposal,
                trial_id=record.trial_id,
                paths=self.paths,
                base_model=self.base_model,
                trials=trials,
                benchmark=self.config.benchmark,
                python=python_for(self.sandbox),
            )
        except TrialSetupError as exc:
            record.status, record.error = "failed", str(exc)
            self.reporter.error(f"{record.trial_id}: {exc}")
            return {"current": record.model_dump(mode="json")}
        seconds_left = max(30.0, self.config.timeout - FINISH_RESERVE_S - self.used_s(state))
        from agent.trials import start_checkpoint

        request = sandbox_request(
            command,
            trial_id=record.trial_id,
            paths=self.paths,
            base_model=self.base_model,
            timeout_s=min(self.config.trial_timeout, seconds_left + 60.0),
            memory_mb=self.config.trial_memory_mb,
            cpus=self.config.trial_cpus,
            model_path=start_checkpoint(record.proposal, self.paths, self.base_model, trials),
        )
        with self.reporter.watching(f"{record.trial_id} training", request.log_path):
            if os.environ.get("RLLOOP_FAILPOINT", "").startswith("run_trial"):
                threading.Timer(3.0, failpoint, ("run_trial", record.index)).start()  # die mid-training
            result = self.sandbox.run(request)
        record = outcome(record, result, self.paths, started)
        record.sandbox = {"backend": result.backend, "image_digest": result.image_digest}
        if record.status == "succeeded":
            loss = record.train_metrics.get("train_loss")
            extra = f", train loss {loss:.3f}" if loss is not None else ""
            self.reporter.info(f"    trained in {record.duration_s:.0f}s{extra}")
        else:
            self.reporter.error(f"{record.trial_id} failed: {record.error} (log: {request.log_path})")
        return {"current": record.model_dump(mode="json")}

    def check_and_repair(
        self, record: TrialRecord, trials: list[TrialRecord], state: LoopState
    ) -> str | None:
        """Proposed code must parse and pass a smoke run (a few steps, a few examples, in the sandbox) before the
        full trial is paid for. Failures go back to the proposer to repair, up to the configured depth."""
        from agent.proposers.llm import check_code

        repair = getattr(self.proposer, "repair", None)
        for attempt in range(self.config.llm_max_repair_attempts + 1):
            assert record.proposal.train_py is not None
            failure = check_code(record.proposal.train_py)
            if failure is None:
                failure = self.smoke_run(record, trials)
            if failure is None:
                if attempt:
                    self.reporter.info(f"    code repaired after {attempt} attempt(s); smoke run passed")
                return None
            self.reporter.warn(
                f"{record.trial_id}: proposed code failed its check: {failure.splitlines()[-1][:200]}"
            )
            if repair is None or attempt == self.config.llm_max_repair_attempts:
                return f"code failed its check: {failure.strip().splitlines()[-1][:300]}"
            try:
                record.proposal = repair(record.proposal, failure)
            except Exception as exc:
                return f"code failed its check and could not be repaired: {exc}"
        return "code failed its check"

    def smoke_run(self, record: TrialRecord, trials: list[TrialRecord]) -> str | None:
        smoke_id = f"{record.trial_id}-smoke"
        try:
            command = prepare_trial(
                record.proposal,
                trial_id=smoke_id,
                paths=self.paths,
                base_model=self.base_model,
                trials=trials,
                benchmark=self.config.benchmark,
                python=python_for(self.sandbox),
            )
        except TrialSetupError as exc:
            return str(exc)
        from agent.trials import checkpoint_ready, start_checkpoint

        request = sandbox_request(
            command,
            trial_id=smoke_id,
            paths=self.paths,
            base_model=self.base_model,
            timeout_s=self.config.smoke_timeout,
            memory_mb=self.config.trial_memory_mb,
            cpus=self.config.trial_cpus,
            model_path=start_checkpoint(record.proposal, self.paths, self.base_model, trials),
        )
        request.env["RLLOOP_SMOKE"] = "1"
        with self.reporter.watching(f"{record.trial_id} smoke run", request.log_path):
            result = self.sandbox.run(request)
        if result.ok and checkpoint_ready(self.paths.trial_dir(smoke_id) / "output"):
            return None
        why = result.reason() if not result.ok else "the smoke run wrote no checkpoint to OUTPUT_DIR"
        return f"smoke run {why}\n--- log tail ---\n{result.log_tail[-3000:]}"

    def submit(self, state: LoopState) -> dict[str, Any]:
        record = TrialRecord.model_validate(state["current"])
        assert record.checkpoint is not None
        grader = self.grader
        started = time.monotonic()
        recovered = self.earlier_submission(self.paths.workspace / record.checkpoint)
        if recovered is not None:  # graded before a crash, never recorded: take that result, submit nothing
            record.score, record.submission_id = recovered["score"], recovered["submission_id"]
            record.grading = {**recovered, "recovered_after_crash": True}
            self.reporter.info(
                f"    {record.trial_id} was graded before the interruption: reusing that result"
            )
            return {"current": record.model_dump(mode="json"), "submissions": recovered["total_submissions"]}
        try:
            with self.reporter.watching(f"{record.trial_id} grading"):
                answer = grader.submit(self.paths.workspace / record.checkpoint)
            failpoint("submit", record.index)  # graded, but the graph has not recorded it yet
        except GraderError as exc:
            record.status, record.error = "failed", str(exc)
            self.reporter.error(f"{record.trial_id}: {exc}")
            return {"current": record.model_dump(mode="json")}
        record.score = float(answer["score"])
        record.submission_id = answer.get("submission_id")
        record.grading = {**answer, "wall_s": round(time.monotonic() - started, 3)}
        return {
            "current": record.model_dump(mode="json"),
            "submissions": int(answer.get("total_submissions", 0)),
        }

    def earlier_submission(self, checkpoint: Path) -> dict[str, Any] | None:
        """The grader's finished, counted submission of this exact checkpoint folder, if there is one."""
        scores = self.grader.get("/scores")
        counted = [
            s
            for s in scores.get("submissions", [])
            if s.get("duplicate_of") is None and s.get("score") is not None
        ]
        for view in counted:
            if (
                view.get("status") == "done"
                and Path(view.get("model_path", "")).resolve() == checkpoint.resolve()
            ):
                return {**view, "total_submissions": len(counted)}
        return None

    def record(self, state: LoopState) -> dict[str, Any]:
        record = TrialRecord.model_validate(state["current"])
        failpoint("record", record.index)
        trials = [*state.get("trials", []), record.model_dump(mode="json")]
        update: dict[str, Any] = {"trials": trials, "current": None}
        best, best_id = state.get("best_score"), state.get("best_trial_id")
        baseline = state.get("baseline_score")
        parent = state.get("mlflow_parent")
        grading = record.grading
        if record.score is not None and not grading.get("duplicate_of"):
            scores = [*state.get("scores", []), record.score]
            update["scores"] = scores
            if not grading.get("flagged") and (best is None or record.score > best):
                best, best_id = record.score, record.trial_id
                update.update(best_score=best, best_trial_id=best_id)
            step = int(state.get("submissions", len(scores)))
            # a flagged submission is never best
            best_so_far = best if best is not None else (baseline or 0.0)
            improvement = best_so_far - (baseline or 0.0)
            if parent and not self.tracker.has_metric_at(parent, "score", step):
                self.tracker.log_metrics(
                    parent,
                    {
                        "score": record.score,
                        "best_score": best_so_far,
                        "submission_count": step,
                        "improvement": improvement,
                    },
                    step=step,
                )
            delta = record.score - (baseline or 0.0)
            ci = grading.get("ci_low"), grading.get("ci_high")
            ci_text = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if None not in ci else ""
            flag = submission_flags(grading)
            self.reporter.info(
                f"    [bold]submission #{step}[/bold]: {record.score:.3f}{ci_text}, {delta:+.3f} vs baseline, "
                f"best {best_so_far:.3f}{flag}"
            )
        elif record.score is not None:
            self.reporter.info(f"    duplicate of submission {grading.get('duplicate_of')}: not counted")
        if parent:
            trial_dir = self.paths.trial_dir(record.trial_id)
            self.tracker.log_trial(
                parent,
                self.paths.run_id,
                self.config.benchmark,
                record,
                [
                    trial_dir / "config.json",
                    trial_dir / "train.py",
                    trial_dir / "proposal.json",
                    trial_dir / "log.txt",
                    trial_dir / "output" / "metrics.json",
                ],
            )
        self.budget.record_compute(record.duration_s)
        spent = self.budget.spent()
        if parent and (spent.tokens or spent.usd):
            self.tracker.log_metrics(
                parent, {"llm_tokens": spent.tokens, "llm_usd": spent.usd}, step=record.index
            )
        update["used_s"] = self._spend(state)
        return update

    def finish(self, state: LoopState) -> dict[str, Any]:
        reason = self.stop_reason(state) or "done"
        status = (
            "terminated"
            if state.get("status") == "terminated"
            else "failed"
            if state.get("halt")
            else "finished"
        )
        final = self.finalize(state, success=status != "failed", status=status, reason=reason)
        return {"status": status, "stop_reason": reason, "final": final, "used_s": self._spend(state)}

    # ---- the end of a run ---------------------------------------------------------------------------------------
    def finalize(self, state: LoopState, *, success: bool, status: str, reason: str) -> dict[str, Any]:
        """Read final results from the grader (never from workspace files), write results.csv, plot, MLflow."""
        final: dict[str, Any] = {}
        try:
            if status != "interrupted":  # ends the grader's run: private scores revealed, no more submissions
                final = self.grader.finalize()
            elif (
                self._grader is not None
                and self._grader.proc is not None
                and self._grader.proc.poll() is None
            ):
                live = self._grader.get("/scores")  # an interrupted run stays open for resume
                final = {
                    "total_submissions": sum(1 for s in live["submissions"] if s.get("duplicate_of") is None)
                }
        except (GraderError, OSError, httpx.HTTPError) as exc:
            self.reporter.warn(f"could not read final results from the grader: {exc}")
        # the final best is chosen on the public split and reported on the private one (when the run has the split)
        baseline = _first(
            final,
            "baseline_private_score",
            default=_first(final, "baseline_score", state.get("baseline_score")),
        )
        best = _first(
            final, "final_private_score", default=_first(final, "best_score", state.get("best_score"))
        )
        submissions = int(_first(final, "total_submissions", default=state.get("submissions", 0)) or 0)
        improvement = (best - baseline) if best is not None and baseline is not None else None
        duration = self.used_s(state)
        row = {
            "run_id": self.paths.run_id,
            "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
            "task": self.config.benchmark,
            "agent": self.config.agent_name
            if self.proposer.name == "builtin"
            else f"rlloop-{self.proposer.name}",
            "driver_model": self.config.driver_model or "",
            "base_model": self.config.base_model,
            "baseline": _fmt(baseline),
            "best_score": _fmt(best),
            "improvement": _fmt(improvement),
            "submissions": submissions,
            "duration_s": round(duration, 1),
            "success": success,
            "workspace": str(self.paths.workspace),
            "isolation": isolation_of(self.sandbox),
        }
        append_result_row(self.config.home / "results.csv", row)
        scores = [float(s) for s in state.get("scores", [])]
        plot = plot_scores(self.paths.plot_png, scores, state.get("baseline_score"), f"{self.paths.run_id}")
        summary = {**row, "status": status, "stop_reason": reason, "grader": final}
        atomic_write_json(self.paths.run_dir / "summary.json", summary)
        parent = state.get("mlflow_parent")
        if parent:
            metrics = {"final_submission_count": float(submissions)}
            if best is not None:
                metrics["final_best_score"] = float(best)
            if improvement is not None:
                metrics["final_improvement"] = float(improvement)
            self.tracker.log_metrics(parent, metrics, step=submissions)
            if plot:
                self.tracker.log_artifact(parent, plot)
            self.tracker.log_artifact(parent, self.paths.run_dir / "summary.json")
            self.tracker.set_tags(
                parent,
                {
                    "rlloop.status": status,
                    "rlloop.stop_reason": reason,
                    "rlloop.isolation": isolation_of(self.sandbox),
                },
            )
            self.tracker.finish(parent, success)
        return summary


def _first(data: dict[str, Any], key: str, default: Any = None) -> Any:
    value = data.get(key)
    return default if value is None else value


def _fmt(value: float | None) -> str:
    return "" if value is None else f"{value:.4f}"


def _recipes(allowed: str | None) -> list[str]:
    """Registered recipes, limited to the run's `--recipes` list when it gives one (in that order)."""
    from trainers.registry import list_recipes

    known = [r.name for r in list_recipes()]
    if not allowed:
        return known
    wanted = [r.strip() for r in allowed.split(",") if r.strip()]
    unknown = [r for r in wanted if r not in known]
    if unknown:
        raise ValueError(f"unknown recipe(s) {', '.join(unknown)} in --recipes; known: {', '.join(known)}")
    return wanted


@contextmanager
def interrupts_as_exceptions() -> Iterator[None]:
    """Turn SIGTERM (and SIGINT) into RunInterrupted, so cleanup runs in one place."""

    def handler(signum: int, frame: FrameType | None) -> None:
        raise RunInterrupted(signal.Signals(signum).name)

    previous = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    for sig in previous:
        signal.signal(sig, handler)
    try:
        yield
    finally:
        for sig, old in previous.items():
            signal.signal(sig, old)


def open_checkpointer(path: Path) -> SqliteSaver:
    conn = sqlite3.connect(str(path), check_same_thread=False)
    return SqliteSaver(conn)


def execute(
    config: RunConfig, *, resume_run_id: str | None = None, reporter: Reporter | None = None
) -> dict[str, Any]:
    """Run (or resume) a research run to its end. Returns the run's summary.

    Ctrl-C and SIGTERM at any point stop every child, keep the workspace and logs, write the results row with
    success false, and leave the run resumable.
    """
    home = ensure_home(config.home)
    config.home = home
    run_id = resume_run_id or config.run_id or new_run_id(config.benchmark)
    paths = RunPaths(home, run_id)
    if resume_run_id:
        if not paths.run_json.exists():
            raise FileNotFoundError(f"no run {run_id!r} under {home / 'runs'}; `rlloop runs` lists them")
        saved = json.loads(paths.run_json.read_text())
        saved.pop("run_id", None)
        saved["home"] = str(home)
        config = RunConfig.model_validate({**saved, "quiet": config.quiet, "run_id": run_id})
    elif paths.run_dir.exists() and paths.checkpoints_db.exists():
        raise FileExistsError(f"run {run_id!r} already exists; resume it with `rlloop resume {run_id}`")
    benchmark = get_benchmark(config.benchmark)
    came_back = paths.run_dir.exists()  # resumed, or a run id an earlier (dead) process had taken
    paths.run_dir.mkdir(parents=True, exist_ok=True)
    reporter = reporter or Reporter(paths.log_file, quiet=config.quiet)
    atomic_write_json(paths.run_json, {**config.model_dump(mode="json"), "run_id": run_id})
    (paths.run_dir / "pid").write_text(str(os.getpid()))
    research: Research | None = None
    try:
        with interrupts_as_exceptions():
            reporter.info(f"[bold]rlloop[/bold] run {run_id}: {config.base_model} on {config.benchmark}")
            base_model = resolve_base_model(
                config.base_model,
                home,
                on_build=lambda n: reporter.info(
                    f"building the built-in model {n} (first use, about a minute)"
                ),
            )
            with reporter.watching(f"writing the {config.benchmark} train/valid splits into the workspace"):
                prepare_workspace(paths, benchmark)  # generated games take a minute the first time
            budget = make_budget(config, paths.budget_ledger)  # a resumed run goes on from what it spent
            proposer = make_proposer(config, budget)
            sandbox = make_sandbox(config, reporter)
            reporter.info(
                f"proposer: {proposer.name} | sandbox: {sandbox.name} | workspace: {paths.workspace}"
            )
            research = Research(config, paths, reporter, proposer, sandbox, budget)
            research.base_model = base_model
            if came_back:  # trials, a grader an earlier, killed process left: ended and named in the log
                end_leftovers(sandbox, paths, reporter)
            values = _drive(research, resume=bool(resume_run_id))
    except (RunInterrupted, KeyboardInterrupt) as exc:
        reason = str(exc) or "SIGINT"
        reporter.warn(f"interrupted ({reason}): stopping trials, keeping the workspace and logs")
        if research is None:
            summary = _interrupted_before_start(config, paths, reason)
        else:
            research.sandbox.cleanup({"rlloop.run": run_id})
            summary = research.finalize(
                research.last_state(), success=False, status="interrupted", reason=reason
            )
            research.close()
        reporter.info(f"resume with: rlloop resume {run_id}")
        reporter.close()
        return summary
    except BaseException:
        if research is not None:
            research.sandbox.cleanup({"rlloop.run": run_id})
            research.close()
        reporter.close()
        raise
    research.close()
    summary = dict(values.get("final", {}))
    print_summary(reporter, dict(values), summary)
    reporter.close()
    return summary


def _drive(research: Research, *, resume: bool) -> LoopState:
    """Invoke the graph until it ends, pausing at approval interrupts until a decision arrives."""
    paths, reporter = research.paths, research.reporter
    graph = build_graph(research).compile(checkpointer=open_checkpointer(paths.checkpoints_db))
    thread: RunnableConfig = {"configurable": {"thread_id": paths.run_id}, "recursion_limit": 10_000}
    research.graph, research.thread = graph, thread
    existing = graph.get_state(thread)
    payload: Any = {"run_id": paths.run_id}
    if resume and existing.values:
        reporter.info(f"resuming after {len(existing.values.get('trials', []))} finished trials")
        payload = _recover_current(existing.values, research)
    while True:
        graph.invoke(payload, thread)
        snapshot = graph.get_state(thread)
        pending = [i for task in snapshot.tasks for i in task.interrupts]
        if not pending:
            return cast(LoopState, snapshot.values)
        trial = pending[0].value["trial"]
        reporter.info(
            f"    waiting for approval of {trial['trial_id']}: `rlloop approve {paths.run_id}` "
            "(or --reject REASON), or the service's approvals page"
        )
        decision = approvals.wait_for_decision(paths.run_dir, trial["trial_id"])
        payload = Command(resume=decision.model_dump(mode="json"))


def _interrupted_before_start(config: RunConfig, paths: RunPaths, reason: str) -> dict[str, Any]:
    """Interrupted before the loop began (building the model, starting up): still one results row."""
    row = {
        "run_id": paths.run_id,
        "timestamp": time.strftime("%Y-%m-%dT%H:%M:%S"),
        "task": config.benchmark,
        "agent": config.agent_name,
        "driver_model": config.driver_model or "",
        "base_model": config.base_model,
        "submissions": 0,
        "success": False,
        "workspace": str(paths.workspace),
    }
    append_result_row(config.home / "results.csv", row)
    summary = {**row, "status": "interrupted", "stop_reason": reason}
    atomic_write_json(paths.run_dir / "summary.json", summary)
    return summary


def _recover_current(values: dict[str, Any], research: Research) -> Any:
    """A trial in flight when the run died is restarted from a clean folder (its half checkpoint is removed)."""
    current = values.get("current")
    if current and current.get("status") in ("pending", "running"):
        research.reporter.warn(f"{current['trial_id']} was interrupted mid-trial; it will be restarted")
    return None


def print_summary(reporter: Reporter, values: dict[str, Any], summary: dict[str, Any]) -> None:
    from rich.table import Table

    table = Table(title=f"run {values.get('run_id', '')}: {summary.get('stop_reason', '')}")
    for column in ("trial", "recipe", "from", "status", "score", "seconds"):
        table.add_column(column)
    for t in values.get("trials", []):
        score = t.get("score")
        table.add_row(
            t["trial_id"],
            t["proposal"]["recipe"],
            t["proposal"].get("init_from") or "base",
            t["status"],
            "" if score is None else f"{score:.3f}",
            f"{t.get('duration_s', 0):.0f}",
        )
    reporter.console.print(table)
    for line in flagged_report(values.get("trials", [])):
        reporter.warn(line)
    baseline, best = values.get("baseline_score"), values.get("best_score")
    if best is not None and baseline is not None:
        gain = (best - baseline) * 100
        verdict = "beats" if best > baseline else "does not beat"
        reporter.info(
            f"[bold]best {best:.3f}[/bold] ({values.get('best_trial_id')}) {verdict} the baseline {baseline:.3f} "
            f"by {gain:+.1f} points over {values.get('submissions', 0)} submissions"
        )
    else:
        reporter.info("no submission beat the baseline")
    grader = summary.get("grader") or {}
    if grader.get("public_private_split") and grader.get("final_private_score") is not None:
        private, private_base = grader["final_private_score"], grader.get("baseline_private_score") or 0.0
        reporter.info(
            f"on the private half of the test set (never used to choose): best {private:.3f} vs baseline "
            f"{private_base:.3f}, {100 * (private - private_base):+.1f} points"
        )
    reporter.info(
        f"results: {summary.get('workspace', '')} | plot: score_over_submissions.png | `rlloop ui` for MLflow"
    )
