"""The research loop's nodes: what each step of the graph (`agent.loop.graph`) does with the run's live resources.

prepare scores the baseline, propose asks the proposer, approve waits for a reviewer, run_trial trains in the
sandbox, submit grades, record keeps the result, finish ends the run. Starting, pausing and resuming a run is
`agent.loop.driver`; the end of a run (results row, plot, MLflow) is `agent.loop.ending` over `agent.results.finish`.
"""

from __future__ import annotations

import os
import threading
import time
from contextlib import nullcontext
from typing import Any

from langgraph.types import interrupt

from agent.core import BaselineScore, Proposal, ProposalContext, TrialRecord
from agent.llm import LLMBudgetExhaustedError, LLMUnavailableError
from agent.loop import approvals, concurrency, prewarm
from agent.loop.codecheck import check_and_repair
from agent.loop.ending import finalize
from agent.loop.graph import LoopState
from agent.loop.limits import TrialLimits
from agent.loop.submission import Screened
from agent.loop.trials import TrialSetupError, allowed_recipes, outcome, with_model_defaults
from agent.processes import failpoint
from agent.proposers import SearchDone
from agent.results import FINISH_RESERVE_S, submission_flags
from agent.run import GraderError
from agent.tracking import traced_nodes
from grader.figures import run_figures
from sandbox.base import SandboxResult
from trainers.schedule import TRIAL_STARTED_ENV

EXIT_ESTIMATE_MAX_S = (
    30.0  # a trainer's exit and the checkpoint's sealing: kept back of a trial's budget at most
)


@traced_nodes  # each node is an MLflow trace linked to its trial's run
class Research(Screened):
    """Implements the loop's nodes over one run's workspace, grader, sandbox, proposer and MLflow parent run
    (validate, and the submission policy, come from `agent.loop.submission.Screened`)."""

    # ---- routing -----------------------------------------------------------------------------------------------
    @property
    def split(self) -> bool:
        """Whether the hidden test set has a private half: the scores the run sees are then the public half's."""
        return self.config.public_fraction > 0

    def stop_reason(self, state: LoopState) -> str | None:
        if state.status == "terminated":
            return "terminated by a reviewer"
        if state.halt:
            return state.halt
        if state.search_done:
            return state.search_done
        if state.queue:  # trained in the same concurrent step (agent.loop.concurrency): recorded first
            return None
        exhausted = self.budget.exhausted()
        if exhausted:
            return f"budget spent: {exhausted}"
        if len(state.trials) >= self.config.loop_n:
            return f"ran all {self.config.loop_n} trials"
        if self.used_s(state) >= self.config.timeout - FINISH_RESERVE_S:
            return f"time budget of {self.config.timeout:.0f}s spent"
        if state.submissions >= self.submission_cap:
            return f"submission cap of {self.submission_cap} reached"
        return None

    def needs_approval(self, state: LoopState) -> bool:
        assert state.current is not None
        return approvals.policy_requires(
            self.config.approval, state.current.proposal, self.config.approval_budget_s
        )

    # ---- nodes -------------------------------------------------------------------------------------------------
    def prepare(self, state: LoopState) -> dict[str, Any]:
        self.launch_warm(
            1
        )  # the first trial's imports overlap the grader's start and the baseline's validation
        baseline = BaselineScore.model_validate(self.grader.get("/scores").get("baseline"))
        score = baseline.score
        parent = self.tracker.start_parent(
            self.paths.run_id,
            self.config.benchmark,
            {
                **self.config.model_dump(mode="json", exclude={"home"}),
                "proposer": self.proposer.name,
                "sandbox_backend": self.sandbox.name,
                "isolation": self.isolation,
                "base_model_path": str(self.base_model),
            },
        )
        self.tracker.log_metrics(parent, {"baseline_score": float(score)}, step=0)
        ci = baseline.ci
        ci_text = f", 95% CI {ci[0]:.3f}-{ci[1]:.3f}" if ci is not None else ""
        n = "?" if baseline.n is None else baseline.n
        self.reporter.info(
            f"[bold]baseline[/bold] {score:.3f} on the {'public half of the ' if self.split else ''}hidden test "
            f"set (n={n}{ci_text})"
        )
        return {
            "baseline_score": score,
            "baseline": baseline,
            "baseline_valid": self.baseline_validation(),
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
        # the next trial of a concurrent step: already trained, validated and recorded in id order
        if state.queue:
            return {"current": state.queue[0], "queue": state.queue[1:], "feedback": None}
        trials = state.trials
        index = len(trials) + 1
        trial_id = f"t{index:02d}"
        context = ProposalContext(
            run_id=self.paths.run_id,
            benchmark=self.config.benchmark,
            benchmark_description=self.benchmark.description,
            base_model=self.config.base_model,
            baseline_score=state.baseline_score,
            baseline_valid_score=state.baseline_valid.score if state.baseline_valid else None,
            baseline_valid_ci=state.baseline_valid.ci if state.baseline_valid else None,
            best_score=state.best_score,
            best_trial_id=state.best_trial_id,
            trials=trials,
            trials_left=self.config.loop_n - len(trials),
            seconds_left=max(0.0, self.config.timeout - FINISH_RESERVE_S - self.used_s(state)),
            submissions_left=self.submission_cap - state.submissions,
            recipes=allowed_recipes(self.config.recipes),
            seed=self.config.seed,
            trial_seconds=self.config.trial_seconds,
            compute_left_s=self.compute_left_s(),
            feedback=state.feedback,
            workspace=str(self.paths.workspace),
            base_model_path=str(self.base_model),
            recipe_defaults={r: self.context.fit.defaults(r) for r in allowed_recipes(self.config.recipes)},
            max_trial_seconds=self.context.fit.max_trial_seconds,
        )
        failpoint("propose", index)
        self.proposer.attach_run(self, trial_id)  # its tools, run log, memory (agent.proposers.base)
        try:
            proposal = self.proposer.propose(context)
        except (
            LLMUnavailableError,
            LLMBudgetExhaustedError,
        ) as exc:  # nothing more can be proposed: end cleanly
            self.reporter.error(f"{exc}")
            return {"current": None, "halt": f"proposer unavailable: {exc}"}
        except SearchDone as exc:  # nothing left worth a trial: the run ends early, finished
            self.reporter.info(f"[bold]stopping early[/bold]: {exc}")
            return {"current": None, "search_done": f"search done: {exc}"}
        except Exception as exc:  # a bad proposal is a failed trial, not a crashed run
            self.reporter.error(f"{trial_id}: the {self.proposer.name} proposer failed: {exc}")
            failed = TrialRecord(
                trial_id=trial_id,
                index=index,
                proposal=Proposal(hypothesis="(no proposal)", recipe="none"),
                status="failed",
                error=f"proposer failed: {exc}"[:500],
            )
            return {"current": failed, "feedback": None}
        proposal = with_model_defaults(proposal, self.context.fit)
        hp = ", ".join(  # `extra` holds notes (why a default was filled in): config.json has them
            f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}"
            for k, v in proposal.hyperparameters.items()
            if k != "extra"
        )
        start = proposal.init_from or "base model"
        self.reporter.info(f"[bold cyan]{trial_id}[/bold cyan] {proposal.recipe} from {start}: {hp}")
        self.reporter.info(f"    [dim]{proposal.hypothesis}[/dim]")
        record = TrialRecord(trial_id=trial_id, index=index, proposal=proposal, status="pending")
        k = concurrency.width(self.config, len(trials), self.submission_cap - state.submissions)
        if k > 1:  # --trial-concurrency: up to k - 1 more trials train with this one (agent.loop.concurrency)
            more = concurrency.more_proposals(
                self, context, record, k, reserved_s=proposal.estimated_cost_s or 0.0
            )
            return {"current": record, "queue": more, "feedback": None}
        return {"current": record, "feedback": None}

    def approve(self, state: LoopState) -> dict[str, Any]:
        record = _in_flight(state)
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
        update["current"] = record
        return update

    def run_trial(self, state: LoopState) -> dict[str, Any]:
        record = _in_flight(state)
        if record.status != "pending":  # trained with the step's other trials (agent.loop.concurrency)
            return {}
        if state.queue:  # --trial-concurrency: this trial and the queued ones train at once
            records = concurrency.train_batch(
                self.context,
                [record, *(r.model_copy() for r in state.queue)],
                lambda r, k, slot: self._train(r, state, k=k, slot=slot),
            )
            return {"current": records[0], "queue": records[1:]}
        return {"current": self._train(record, state)}

    def _train(self, record: TrialRecord, state: LoopState, *, k: int = 1, slot: int = 0) -> TrialRecord:
        """Train one trial in the sandbox; `k` > 1: as the `slot`-th of k at once (no live status line of its own)."""
        trials = state.trials
        started = time.time()
        if record.proposal.train_py:
            problem = check_and_repair(self, record, trials)
            if problem is not None:
                record.status, record.error = "failed", problem
                record.duration_s = round(time.time() - started, 2)
                self.reporter.error(f"{record.trial_id}: {problem}")
                return record
        seconds_left = max(30.0, self.config.timeout - FINISH_RESERVE_S - self.used_s(state))
        limits = self.trial_limits(min(self.context.limits.timeout_s, seconds_left + 60.0))
        result = self._train_warm(record, trials, started, limits) if k == 1 else None
        if result is None:
            try:
                request = self.trial_request(record.proposal, record.trial_id, trials, limits)
                request = concurrency.split_request(
                    request, k, slot, self.devices, self.sandbox.schedules_resources
                )
                # the trial's clock starts here, with the host's work for it: its max_seconds count from now
                env = {**request.env, TRIAL_STARTED_ENV: f"{started:.3f}"}
                request = request.model_copy(update={"env": env})
            except TrialSetupError as exc:
                record.status, record.error = "failed", str(exc)
                self.reporter.error(f"{record.trial_id}: {exc}")
                return record
            with (
                self.reporter.watching(f"{record.trial_id} training", request.log_path)
                if k == 1
                else nullcontext()
            ):
                self._failpoint_mid_training(record)
                if k == 1:
                    self._warm_next(record)
                result = self.sandbox.run(request)
        record = outcome(record, result, self.paths, started)
        trainer_wall = record.train_metrics.get("wall_seconds")  # the trial's word: used only as an estimate
        if trainer_wall is not None and k == 1:
            self.exit_estimate_s = min(max(record.duration_s - trainer_wall, 0.0), EXIT_ESTIMATE_MAX_S)
        record.sandbox = {"backend": result.backend, "image_digest": result.image_digest}
        # a backend that places trials on other machines (ray) says where this one ran
        node = result.node
        if node:
            record.sandbox["node"] = dict(node)
            record.sandbox["gpus"] = list(result.gpus)
            self.reporter.info(
                f"    {record.trial_id} ran on node {node.get('node_id', '?')} ({node.get('hostname', '?')}, "
                f"{node.get('node_ip', '?')})"
            )
        if record.status == "succeeded":
            loss = record.train_metrics.get("train_loss")
            extra = f", train loss {loss:.3f}" if loss is not None else ""
            train = record.train_s
            trained = f", {train:.0f}s of it training" if train is not None else ""
            self.reporter.info(f"    trained in {record.duration_s:.0f}s{trained}{extra}")
        else:
            log = self.paths.trial_dir(record.trial_id) / "log.txt"
            self.reporter.error(f"{record.trial_id} failed: {record.error} (log: {log})")
        return record

    def _train_warm(
        self, record: TrialRecord, trials: list[TrialRecord], started: float, limits: TrialLimits
    ) -> SandboxResult | None:
        """Train `record` in the warm sandbox started for it (agent.loop.prewarm), if there is one that can take it;
        None: train it in a fresh sandbox."""
        warm = self.take_warm(record.trial_id)
        if warm is None:
            return None
        try:
            prepared = self.prepare_warm(warm, record.proposal, trials, limits)
        except (
            TrialSetupError
        ):  # the fresh path says what is wrong (or trains it, for a start it cannot link)
            prewarm.cancel(warm, self.sandbox)
            return None
        if not prewarm.go(warm, prepared, started, sandbox=self.sandbox):
            return None
        self._warm_next(record)
        with self.reporter.watching(f"{record.trial_id} training", warm.request.log_path):
            self._failpoint_mid_training(record)
            return prewarm.wait(warm, started, sandbox=self.sandbox, timeout_s=limits.timeout_s)

    def _warm_next(self, record: TrialRecord) -> None:
        """While `record` trains, the next trial's sandbox starts and imports (on the core its one thread leaves)."""
        if record.index < self.config.loop_n:
            self.launch_warm(record.index + 1)

    @staticmethod
    def _failpoint_mid_training(record: TrialRecord) -> None:
        if os.environ.get("RLLOOP_FAILPOINT", "").startswith("run_trial"):
            threading.Timer(3.0, failpoint, ("run_trial", record.index)).start()  # die mid-training

    def validate(self, state: LoopState) -> dict[str, Any]:
        update = super().validate(state)
        if update.get("submit_now") and state.submissions >= self.submission_cap:
            # a queued trial of a concurrent step, trained before the cap was reached: kept, not graded
            note = f"not submitted: the submission cap of {self.submission_cap} is reached"
            record = update["current"].model_copy(update={"submission_note": note})
            self.reporter.info(f"    {note}")
            update = {**update, "current": record, "submit_now": False}
        return update

    def submit(self, state: LoopState) -> dict[str, Any]:
        record = _in_flight(state)
        assert record.checkpoint is not None
        grader = self.grader
        started = time.monotonic()
        checkpoint = self.paths.checkpoint(record.checkpoint)
        recovered = self.earlier_submission(checkpoint)
        if recovered is not None:  # graded before a crash, never recorded: take that result, submit nothing
            record.score, record.submission_id = recovered["score"], recovered["submission_id"]
            record.grading = {**recovered, "recovered_after_crash": True}
            self.reporter.info(
                f"    {record.trial_id} was graded before the interruption: reusing that result"
            )
            return {"current": record, "submissions": recovered["total_submissions"]}
        try:
            with self.reporter.watching(f"{record.trial_id} grading"):
                answer = grader.submit(checkpoint)
            failpoint("submit", record.index)  # graded, but the graph has not recorded it yet
        except GraderError as exc:
            record.status, record.error = "failed", str(exc)
            self.reporter.error(f"{record.trial_id}: {exc}")
            return {"current": record}
        sealed, scored = record.checkpoint_sha256, answer.files_sha256
        if sealed and scored and sealed != scored:  # cannot happen while trials write only their own folder
            self.reporter.error(
                f"{record.trial_id}: the grader scored files (sha256 {scored[:12]}) other than the checkpoint sealed "
                f"when the trial ended ({sealed[:12]})"
            )
        record.score = answer.score
        record.submission_id = answer.submission_id
        record.grading = {**answer.model_dump(mode="json"), "wall_s": round(time.monotonic() - started, 3)}
        return {"current": record, "submissions": answer.total_submissions}

    def record(self, state: LoopState) -> dict[str, Any]:
        record = _in_flight(state)
        failpoint("record", record.index)
        update: dict[str, Any] = {"trials": [*state.trials, record], "current": None}
        best = state.best_score
        baseline = state.baseline_score
        parent = state.mlflow_parent
        grading = record.grading
        if record.score is not None and not grading.get("duplicate_of"):
            scores = [*state.scores, record.score]
            update["scores"] = scores
            if not grading.get("flagged") and (best is None or record.score > best):
                best = record.score
                update.update(best_score=best, best_trial_id=record.trial_id)
            step = state.submissions
            # the score rule on the public scores seen so far (a flagged submission is never best)
            live = run_figures(baseline or 0.0, best)
            if parent and not self.tracker.has_metric_at(parent, "score", step):
                self.tracker.log_metrics(
                    parent,
                    {
                        "score": record.score,
                        "best_score": live.best,
                        "submission_count": step,
                        "improvement": live.improvement,
                    },
                    step=step,
                )
            delta = record.score - (baseline or 0.0)
            ci = grading.get("ci_low"), grading.get("ci_high")
            ci_text = f" (95% CI {ci[0]:.3f}-{ci[1]:.3f})" if None not in ci else ""
            flag = submission_flags(grading)
            half = "public half " if self.split else ""
            self.reporter.info(
                f"    [bold]submission #{step}[/bold]: {half}{record.score:.3f}{ci_text}, {delta:+.3f} vs baseline, "
                f"best {live.best:.3f}{flag}"
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
                    trial_dir / "proposal_tools.jsonl",
                    trial_dir / "log.txt",
                    trial_dir / "metrics.json",  # the host's copy of the numbers in output/metrics.json
                ],
                extra_tags=node_tags(record.sandbox.get("node")),
            )
        self.budget.record_compute(record.wall_s)
        spent = self.budget.spent()
        if parent and (spent.tokens or spent.usd):
            self.tracker.log_metrics(
                parent, {"llm_tokens": spent.tokens, "llm_usd": spent.usd}, step=record.index
            )
        update["used_s"] = self._spend(state)
        return update

    def finish(self, state: LoopState) -> dict[str, Any]:
        self.cancel_warm()  # no trial follows
        reason = self.stop_reason(state) or "done"
        status = "terminated" if state.status == "terminated" else "failed" if state.halt else "finished"
        graded, update = self.submit_at_end(state, self.submit) if status != "failed" else (state, {})
        final = finalize(self, graded, success=status != "failed", status=status, reason=reason)
        if self.config.memory:  # lessons for later runs on this benchmark and model (agent.proposers.memory)
            from agent.proposers import remember_run

            c = self.config
            remember_run(
                c.home, c.benchmark, c.base_model, self.paths.run_id, graded.trials, graded.baseline_score
            )
        return {
            **update,
            "status": status,
            "stop_reason": reason,
            "final": final,
            "used_s": self._spend(state),
        }


def _in_flight(state: LoopState) -> TrialRecord:
    """A copy of the trial in flight, for a node to change: the state's own object is also the checkpoint's."""
    assert state.current is not None
    return state.current.model_copy()


def node_tags(node: Any) -> dict[str, str] | None:
    """MLflow tags naming the machine a trial ran on, where its backend said (ray: node id, IP, hostname)."""
    if not isinstance(node, dict) or not node:
        return None
    return {
        f"rlloop.{key}": str(value)
        for key, value in node.items()
        if key in ("node_id", "node_ip", "hostname")
    }
