"""The run page's, the trial view's and the approval card's data, assembled from what the run records.

Sources, all written by the host: the loop's checkpoint (trials, current, scores, stop reason), run.json (the
config: caps, policy), budget.json (spend), scores.json (the grader's mirror: private scores only once finalized) and
approvals/. Trial-written files are read in `trialfiles` only. Nothing here raises on a half-written run: a missing
file is an empty section.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from agent.core import TrialRecord
from agent.service.lineage import (
    BASE,
    asked_because,
    base_node,
    changes,
    code_view,
    config_diff,
    estimated_compute_s,
    field_specs,
    trial_node,
)
from agent.service.page_schemas import (
    ApprovalContext,
    BudgetLine,
    DecisionEntry,
    NodeState,
    RunPage,
    Scored,
    ScoreSeries,
    Submission,
    TreeNode,
    TrialDetail,
)
from agent.service.recipes import RecipeView, ServiceRecipes
from agent.service.schemas import RunSummary
from agent.service.trialfiles import TrialFiles
from agent.status import Headline, read_state, run_headline
from sandbox import untrusted

SMALL_JSON = 4 * 1024 * 1024
ACTIVE = ("queued", "running", "waiting for approval")


def read_json(run_dir: Path, name: str) -> dict[str, Any]:
    """A host-written JSON file of the run folder (never through a link; capped); {} when absent or unreadable."""
    try:
        data = untrusted.read_json(run_dir, name, max_bytes=SMALL_JSON)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


class RunRecords:
    """One run's records, read once per request."""

    def __init__(self, run_dir: Path, recipes: ServiceRecipes | None = None) -> None:
        self.run_dir = run_dir
        self.recipes = RecipeView(run_dir, recipes)
        self.state = read_state(run_dir)
        self.config = read_json(run_dir, "run.json")
        self.scores = read_json(run_dir, "scores.json")
        self.spent = read_json(run_dir, "budget.json")
        self.trials: list[dict[str, Any]] = [t for t in self.state.get("trials") or [] if isinstance(t, dict)]
        current = self.state.get("current")
        self.current: dict[str, Any] | None = current if isinstance(current, dict) else None
        self.pending = pending_of(run_dir)

    def trial(self, trial_id: str) -> dict[str, Any] | None:
        """A finished trial, the one in flight, or a pending proposal (in that order)."""
        for trial in self.trials:
            if trial.get("trial_id") == trial_id:
                return trial
        if self.current and self.current.get("trial_id") == trial_id:
            return self.current
        for pending in self.pending:
            if pending.trial_id == trial_id:
                return pending.model_dump(mode="json")
        return None

    def proposal_of(self, trial_id: str | None) -> dict[str, Any] | None:
        found = self.trial(trial_id) if trial_id and trial_id != BASE else None
        proposal = (found or {}).get("proposal")
        return proposal if isinstance(proposal, dict) else None

    @property
    def best_trial_id(self) -> str | None:
        value = self.state.get("best_trial_id")
        return str(value) if value else None

    def node(self, trial_id: str | None) -> TreeNode | None:
        if not trial_id or trial_id == BASE:
            return base_node(self.state, self.scores)
        found = self.trial(trial_id)
        return trial_node(found, self.best_trial_id) if found else None

    def waiting_ids(self) -> set[str]:
        return {p.trial_id for p in self.pending}

    def nodes(self) -> list[TreeNode]:
        """The tree: the base model, every finished trial, the one in flight, and what waits for a person."""
        out = [base_node(self.state, self.scores)]
        seen: set[str] = set()
        for trial in self.trials:
            out.append(trial_node(trial, self.best_trial_id))
            seen.add(str(trial.get("trial_id")))
        waiting = self.waiting_ids()
        if self.current and self.current.get("trial_id") not in seen:
            trial_id = str(self.current.get("trial_id"))
            state: NodeState = "pending" if trial_id in waiting else "running"
            out.append(trial_node(self.current, self.best_trial_id, state))
            seen.add(trial_id)
        for pending in self.pending:
            if pending.trial_id not in seen:
                out.append(trial_node(pending.model_dump(mode="json"), self.best_trial_id, "pending"))
        return out

    def score_series(self) -> ScoreSeries:
        """Public scores per submission with CIs; private ones only when the grader has finalized the run."""
        by_submission = {
            t.get("submission_id"): str(t.get("trial_id"))
            for t in self.trials
            if t.get("submission_id") is not None
        }
        finalized = bool(self.scores.get("finalized"))
        found = self.scores.get("baseline")
        if not isinstance(found, dict) and self.state.get("baseline_score") is not None:
            found = self.state.get("baseline") or {"score": self.state.get("baseline_score")}
        baseline: dict[str, Any] = found if isinstance(found, dict) else {}
        submissions: list[Submission] = []
        for sub in self.scores.get("submissions") or []:
            if not isinstance(sub, dict) or sub.get("status") not in (None, "done"):
                continue
            if sub.get("duplicate_of") is not None or sub.get("submission_id") is None:
                continue
            submissions.append(
                Submission(
                    submission_id=int(sub["submission_id"]),
                    trial_id=by_submission.get(sub["submission_id"]),
                    score=sub.get("score"),
                    ci_low=sub.get("ci_low"),
                    ci_high=sub.get("ci_high"),
                    private_score=sub.get("private_score") if finalized else None,
                    elapsed_s=sub.get("elapsed_seconds"),
                    flags=[str(f) for f in sub.get("flags") or []],
                )
            )
        return ScoreSeries(
            baseline=Scored(
                score=baseline.get("score"),
                ci_low=baseline.get("ci_low"),
                ci_high=baseline.get("ci_high"),
                n=baseline.get("n"),
            ),
            baseline_private=baseline.get("private_score") if finalized else None,
            submissions=submissions,
            finalized=finalized,
        )

    def budget(self) -> list[BudgetLine]:
        """Tokens, dollars, compute and wall time: spent (budget.json, the checkpoint) against the run's caps."""

        def number(source: dict[str, Any], key: str) -> float | None:
            value = source.get(key)
            return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None

        # (line, unit, where the spending is counted, its key, the RunConfig field that caps it)
        lines = [
            ("LLM tokens", "tokens", self.spent, "tokens", "llm_max_tokens"),
            ("LLM dollars", "USD", self.spent, "usd", "llm_max_usd"),
            ("trial compute", "s", self.spent, "compute_s", "max_compute_s"),
            ("wall time", "s", self.state, "used_s", "timeout"),
        ]
        return [
            BudgetLine(name=name, unit=unit, spent=number(source, key) or 0.0, cap=number(self.config, cap))
            for name, unit, source, key, cap in lines
        ]

    def history(self) -> list[DecisionEntry]:
        """Every decision a person made on this run's proposals, oldest first."""
        out: list[DecisionEntry] = []
        seen: set[str] = set()
        records = [*self.trials, *([self.current] if self.current else [])]
        for trial in records:
            approval = trial.get("approval")
            trial_id = str(trial.get("trial_id"))
            if isinstance(approval, dict) and trial_id not in seen:
                seen.add(trial_id)
                out.append(_decision(trial_id, approval))
        for path in sorted((self.run_dir / "approvals").glob("*.decided.json")):
            trial_id = path.name.removesuffix(".decided.json")
            if trial_id in seen:
                continue
            data = read_json(self.run_dir, f"approvals/{path.name}")
            if data:
                seen.add(trial_id)
                out.append(_decision(trial_id, data))
        return sorted(out, key=lambda d: d.at or "")

    def approval_context(self, pending: TrialRecord) -> ApprovalContext:
        proposal = pending.proposal.model_dump(mode="json")
        parent_id = pending.proposal.parent
        parent = self.proposal_of(parent_id)
        threshold = float(self.config.get("approval_budget_s") or 600.0)
        trial_seconds = self.config.get("trial_seconds")
        return ApprovalContext(
            parent=self.node(parent_id),
            operator=pending.proposal.operator,
            changes=changes(pending.proposal.hyperparameters, parent, pending.proposal.recipe, self.recipes),
            code=code_view(proposal, parent, parent_id, self.run_dir, self.recipes),
            config_diff=config_diff(pending.proposal.hyperparameters, parent, parent_id),
            estimated_compute_s=estimated_compute_s(
                proposal, float(trial_seconds) if isinstance(trial_seconds, int | float) else None
            ),
            estimated_usd=0.0,  # a trial calls no LLM (no network in its sandbox): dollars are spent proposing
            budget=self.budget(),
            policy=str(self.config.get("approval") or ""),
            asked_because=asked_because(str(self.config.get("approval") or ""), proposal, threshold),
            history=self.history(),
            failures=[n for n in self.nodes() if n.state == "failed"],
            fields=field_specs(pending.proposal.recipe, pending.proposal.hyperparameters, self.recipes),
            notes=[self.recipes.note] if self.recipes.note else [],
        )

    def headline(self, status: str) -> Headline:
        """What the run achieved: its live (public) figures, and the private half from summary.json once it ended
        (a summary left by an earlier stop of a run that runs again is not its end)."""
        ended = status not in ACTIVE or self.state.get("status") in ("finished", "terminated", "failed")
        return run_headline(self.state, read_json(self.run_dir, "summary.json") if ended else {})

    def page(self, summary: RunSummary, mlflow_url: str | None) -> RunPage:
        loop_n = self.config.get("loop_n")
        return RunPage(
            run_id=summary.run_id,
            status=summary.status,
            benchmark=summary.benchmark,
            base_model=summary.base_model,
            stop_reason=self.state.get("stop_reason"),
            headline=self.headline(summary.status),
            approval_policy=str(self.config.get("approval") or ""),
            waiting=summary.pending_approvals,
            nodes=self.nodes(),
            scores=self.score_series(),
            budget=self.budget(),
            trials_done=len(self.trials),
            trials_planned=int(loop_n) if isinstance(loop_n, int) else None,
            history=self.history(),
            mlflow_url=mlflow_url,
            mlflow_runs_url=experiment_url(mlflow_url),
            mlflow_scores_url=score_charts_url(mlflow_url),
            links={"api": f"/runs/{summary.run_id}", "page": "/", "cancel": summary.links.cancel},
        )

    def trial_detail(self, trial_id: str) -> TrialDetail | None:
        found = self.trial(trial_id)
        if found is None:
            return None
        waiting = trial_id in self.waiting_ids()
        node = trial_node(found, self.best_trial_id, "pending" if waiting else None)
        if found is self.current and not waiting:
            node = trial_node(found, self.best_trial_id, "running")
        given = found.get("proposal")
        proposal: dict[str, Any] = given if isinstance(given, dict) else {}
        parent_id = proposal.get("parent") or proposal.get("init_from")
        parent = self.proposal_of(parent_id)
        files = TrialFiles(self.run_dir, trial_id)
        failures, valid_n = files.failures()
        log_tail, log_truncated = files.log_tail()
        return TrialDetail(
            run_id=self.run_dir.name,
            trial_id=trial_id,
            node=node,
            proposal=proposal,
            changes=changes(
                proposal.get("hyperparameters") or {}, parent, str(proposal.get("recipe") or ""), self.recipes
            ),
            code=code_view(proposal, parent, parent_id, self.run_dir, self.recipes),
            config_diff=config_diff(proposal.get("hyperparameters") or {}, parent, parent_id),
            log_tail=log_tail,
            log_truncated=log_truncated,
            train_metrics=dict(found.get("train_metrics") or {}),
            metric_series=files.metric_series(),
            failures=failures,
            valid_n=valid_n,
            grading=dict(found.get("grading") or {}),
            tool_calls=files.tool_calls(),
            approval=found.get("approval"),
            duration_s=float(found.get("duration_s") or 0.0),
            wall_s=float(found.get("wall_s") or 0.0)
            or float(found.get("duration_s") or 0.0) + float(found.get("validation_s") or 0.0),
            train_s=_train_seconds(found),
            notes=[*files.notes, *([self.recipes.note] if self.recipes.note else [])],
            run_waiting=sorted(self.waiting_ids()),
        )


def pending_of(run_dir: Path) -> list[TrialRecord]:
    """This run's proposals waiting for a decision (approvals/*.pending.json, written by the loop)."""
    found: list[TrialRecord] = []
    for path in sorted((run_dir / "approvals").glob("*.pending.json")):
        try:
            found.append(TrialRecord.model_validate_json(path.read_text()))
        except (OSError, ValueError):
            continue
    return found


def _decision(trial_id: str, data: dict[str, Any]) -> DecisionEntry:
    given = data.get("set")
    return DecisionEntry(
        trial_id=trial_id,
        action=str(data.get("action") or "?"),
        by=data.get("by"),
        at=data.get("at"),
        reason=data.get("reason"),
        set=given if isinstance(given, dict) else {},
    )


def experiment_url(run_url: str | None) -> str | None:
    """The MLflow training runs table of the run's experiment, in the review view (`agent.tracking.runs_url`)."""
    if not run_url:
        return None
    from agent.tracking import runs_url

    return runs_url(run_url)


def score_charts_url(run_url: str | None) -> str | None:
    """The MLflow parent run's metric charts, score over submissions (`agent.tracking.scores_url`)."""
    if not run_url:
        return None
    from agent.tracking import scores_url

    return scores_url(run_url)


def etag_of(body: Any) -> str:
    """A weak ETag of a JSON-able body: the page polls with If-None-Match and gets 304 until something changes."""
    import hashlib

    text = json.dumps(body, sort_keys=True, default=str)
    return 'W/"' + hashlib.sha256(text.encode()).hexdigest()[:32] + '"'


def _train_seconds(trial: dict[str, Any]) -> float | None:
    """A trial's training seconds, as its trainer reported them (None: it reported none)."""
    value = (trial.get("train_metrics") or {}).get("train_seconds")
    return float(value) if isinstance(value, int | float) else None
