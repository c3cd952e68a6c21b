"""Which checkpoints go to the grader (`RunConfig.submit`), decided on the free valid split (`agent.loop.validation`).

- "all": every trained checkpoint is submitted (the loop's behaviour before validation existed).
- "improved" (default): a checkpoint is submitted only when it beats the reference beyond noise, where the reference
  is the best submitted trial by valid score (the base model before anything was submitted). "Beyond noise" is
  either of two tests at 95%: the lower bound of the gain in valid score, counting the noise of both scores, is above
  zero, or the paired bootstrap lower bound of the per-sample gain (both scored on the same valid samples) is. A
  checkpoint that is no better keeps its valid score and is recorded as not submitted, with the figures that decided it.
- "final": nothing is submitted while the loop runs; at the end the best trial by valid score is submitted once.

Under "improved" and "final" alike, a run ends by grading its best trial by valid score when the grader has not seen
it and it beats on valid what was graded (`Screened.end_candidate`): the run's answer is its best checkpoint.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Literal

from agent.core import BaselineScore, TrialRecord, Validation
from agent.loop.graph import LoopState
from agent.loop.resources import RunResources
from agent.loop.validation import (
    BASE_ID,
    clearly_apart,
    gain_low,
    load_validation,
    paired_gain_low,
    paired_gain_mean,
    valid_samples,
    validate,
    validation_file,
)
from agent.processes import failpoint
from grader.config import EvalConfig
from grader.figures import run_figures

SubmitPolicy = Literal["all", "improved", "final"]


def beats_beyond_noise(new: Validation, ref: Validation, ref_name: str = "the reference") -> tuple[bool, str]:
    """(whether `new` is better than `ref` beyond noise, why in words: the test that passed, or what each of the two
    compared and fell short of). `ref_name` names the reference in those words (t02, the base model)."""
    unpaired = gain_low(new, ref)
    if unpaired > 0:
        return True, (
            f"its valid score {new.score:.3f} is above {ref_name}'s {ref.score:.3f} by at least {unpaired:+.3f} "
            "(95% lower bound, both scores' noise counted)"
        )
    gain = paired_gain_low(new, ref)
    if gain is not None and gain > 0:
        return True, (
            f"paired on the same valid samples, its gain over {ref_name} is at least {gain:+.3f} (95% lower bound)"
        )
    paired = (
        f"it shares no valid sample with {ref_name} to pair"
        if gain is None
        else f"paired on the same valid samples, its gain over {ref_name} may be as low as {gain:+.3f} (95% lower "
        "bound, not above 0)"
    )
    return False, (
        f"its valid score {new.score:.3f} against {ref_name}'s {ref.score:.3f} may be a gain as low as "
        f"{unpaired:+.3f} (95% lower bound, both scores' noise counted), and {paired}"
    )


def should_submit(
    policy: SubmitPolicy, new: Validation | None, ref: Validation | None, ref_name: str
) -> tuple[bool, str]:
    """(submit now?, why). Without a validation (it failed) or a reference, "improved" submits: no evidence
    against the checkpoint is not evidence for skipping it. `ref_name`: the reference, the best submitted so far
    (t02, the base model)."""
    if policy == "all":
        return True, "submit=all"
    if policy == "final":
        return False, "not submitted yet: submit=final sends only the best by valid score at the end"
    if new is None or ref is None:
        return True, "no valid score to compare"
    better, why = beats_beyond_noise(new, ref, ref_name)
    if better:
        return True, f"better than {ref_name} beyond noise: {why}"
    return False, f"not submitted: not better than {ref_name} beyond noise: {why}"


def _sized(result: Validation) -> str:
    """n, and where validation stopped early, of how many and why."""
    if result.planned is None:
        return f"n={result.n}"
    return f"n={result.n} of {result.planned}: clearly apart from the reference, the rest not scored"


def best_by_valid(trials: list[TrialRecord], *, submitted: bool | None = None) -> TrialRecord | None:
    """The succeeded trial with the highest valid score (ties: the earlier one); `submitted` True/False limits it
    to trials that were / were not graded. Flagged and duplicate submissions never count as best."""
    best: TrialRecord | None = None
    for trial in trials:
        if trial.status != "succeeded" or trial.valid_score is None:
            continue
        graded = trial.submission_id is not None or trial.score is not None
        if submitted is not None and graded != submitted:
            continue
        if trial.grading.get("flags") or trial.grading.get("duplicate_of"):
            continue
        if best is None or trial.valid_score > (best.valid_score or 0.0):
            best = trial
    return best


class Screened(RunResources):
    """The loop's validation step and submission policy over one run's resources (`agent.loop.nodes.Research`)."""

    def eval_config(self) -> EvalConfig:
        """The grader's decoding, batching and prompt format (agent.run.grading builds its EvalConfig from the same
        settings)."""
        if self.config.prompt_format == "chat":
            return EvalConfig(
                batch_size=self.config.eval_batch_size,
                prompt_style="chat",
                system_prompt=self.config.system_prompt,
            )
        return EvalConfig(batch_size=self.config.eval_batch_size)

    def validation_of(
        self, name: str, checkpoint: Path, *, reuse: bool = False, against: Validation | None = None
    ) -> Validation | None:
        """`checkpoint` scored on the valid split into trials/<name>/validation.json (None, with a warning, when
        it cannot be scored). `reuse`: an earlier file for the same name stands (the base model's, on resume).
        `against`: the validation it is judged against; scoring stops once it is clearly above or below it."""
        out = validation_file(self.paths.trials_dir, name)
        if reuse and (earlier := load_validation(out)) is not None:
            return earlier
        try:
            started = time.monotonic()
            with self.reporter.watching(f"{name} validation"):
                result = validate(
                    checkpoint,
                    base_model=self.base_model,
                    samples=valid_samples(self.benchmark, self.config.valid_limit),
                    benchmark=self.benchmark,
                    config=self.eval_config(),
                    out=out,
                    settled=None if against is None else lambda scores: clearly_apart(scores, against),
                )
            self.validation_estimate_s = time.monotonic() - started
            return result
        except Exception as exc:  # noqa: BLE001 - a checkpoint that cannot be validated is graded as before
            self.reporter.warn(f"{name}: validation failed ({type(exc).__name__}: {str(exc)[:200]})")
            return None

    def baseline_validation(self) -> BaselineScore | None:
        """The base model's valid score, computed once per run (cached in trials/base/validation.json)."""
        result = self.validation_of(BASE_ID, self.base_model, reuse=True)
        if result is None:
            return None
        self.reporter.info(f"[bold]baseline[/bold] {result.text()} on the public valid split (n={result.n})")
        return BaselineScore(score=result.score, n=result.n, ci_low=result.ci_low, ci_high=result.ci_high)

    def reference(self, state: LoopState) -> tuple[Validation | None, str]:
        """What a new checkpoint must beat under submit=improved: the best submitted trial by valid score, or the
        base model while nothing has been submitted."""
        best = best_by_valid(state.trials, submitted=True)
        if best is not None and best.valid_score is not None:
            found = load_validation(validation_file(self.paths.trials_dir, best.trial_id))
            fallback = Validation(
                score=best.valid_score,
                n=best.valid_n or 0,
                ci_low=best.valid_ci_low or best.valid_score,
                ci_high=best.valid_ci_high or best.valid_score,
            )
            return found or fallback, best.trial_id
        base = state.baseline_valid
        if base is None:
            return None, "no reference"
        found = load_validation(validation_file(self.paths.trials_dir, BASE_ID))
        return found or Validation.model_validate(base.model_dump()), "the base model"

    def validate(self, state: LoopState) -> dict[str, Any]:
        """Score the trial's checkpoint on the valid split, then let the submission policy decide on it."""
        assert state.current is not None
        record = state.current.model_copy()  # the state's own object is also the checkpoint's
        assert record.checkpoint is not None
        started = time.monotonic()
        ref, ref_name = self.reference(state)
        result = self.validation_of(
            record.trial_id,
            self.paths.checkpoint(record.checkpoint),
            against=ref,
        )
        record.validation_s = round(time.monotonic() - started, 2)  # part of the trial's wall seconds
        if result is not None:
            record.valid_score, record.valid_n = result.score, result.n
            record.valid_ci_low, record.valid_ci_high = result.ci_low, result.ci_high
        failpoint("validate", record.index)  # validated, the decision not yet recorded
        go, why = should_submit(self.config.submit, result, ref, ref_name)
        record.submission_note = why
        shown = f"valid {result.text()} ({_sized(result)})" if result is not None else "no valid score"
        self.reporter.info(f"    {shown}: {'submitting, ' + why if go else why}")
        parent = state.mlflow_parent
        base = state.baseline_valid
        if parent and base and not self.tracker.has_metric_at(parent, "baseline_valid_score", 0):
            self.tracker.log_metrics(parent, {"baseline_valid_score": base.score}, step=0)
        if (
            parent
            and result is not None
            and not self.tracker.has_metric_at(parent, "valid_score", record.index)
        ):
            self.tracker.log_metrics(parent, {"valid_score": result.score}, step=record.index)
        return {"current": record, "submit_now": go}

    def end_candidate(self, state: LoopState) -> tuple[TrialRecord | None, str]:
        """The checkpoint the run hands its user, if the grader has not seen it yet: the best trial by valid score.
        Under "final" it is always graded at the end; under "improved" when it beats, on valid, every checkpoint
        graded so far (the base model while none was) and a submission is left. A checkpoint the policy kept back
        mid-run as "not beyond noise" is still the better answer on valid, and the run must not end reporting a
        worse one (`submit=all` grades everything as it goes)."""
        if self.config.submit == "all":
            return None, ""
        best = best_by_valid(state.trials)
        if best is None or best.score is not None or best.submission_id is not None:
            return None, ""
        if self.config.submit == "final":
            return best, "submitted at the end: the best trial by valid score (submit=final)"
        if state.submissions >= self.submission_cap:
            return None, ""
        ref, ref_name = self.reference(state)
        above = ""
        if ref is not None:
            mine = load_validation(validation_file(self.paths.trials_dir, best.trial_id))
            gain = paired_gain_mean(mine, ref) if mine is not None and ref.samples else None
            if gain is None:
                gain = (best.valid_score or 0.0) - ref.score
            if gain <= 0:  # no better on valid: on the samples both scored, where both kept theirs
                return None, ""
            above = f", {gain:+.3f} over {ref_name} on the valid samples both scored"
        return best, (
            f"submitted at the end: the best trial by valid score ({best.valid_score:.3f}{above}); kept back "
            "mid-run as not better beyond noise"
        )

    def submit_at_end(
        self, state: LoopState, submit: Callable[[LoopState], dict[str, Any]]
    ) -> tuple[LoopState, dict[str, Any]]:
        """Grade `end_candidate` once (`submit` is the loop's submit node; a resumed run finds the earlier grading
        instead of submitting again). Returns the state with that trial's grading, the run's best and its
        submission count filled in, and those keys alone."""
        best, note = self.end_candidate(state)
        if best is None:
            return state, {}
        answer: TrialRecord = submit(state.model_copy(update={"current": best}))["current"]
        graded = answer.model_copy(update={"submission_note": note})
        update: dict[str, Any] = {
            "trials": [graded if t.trial_id == graded.trial_id else t for t in state.trials]
        }
        if graded.score is not None:
            update["scores"] = [*state.scores, graded.score]
            update["submissions"] = int(graded.grading.get("total_submissions", len(update["scores"])))
            earlier = state.best_score
            if (
                not graded.grading.get("flags")
                and not graded.grading.get("duplicate_of")
                and (earlier is None or graded.score > earlier)
            ):
                update["best_score"], update["best_trial_id"] = graded.score, graded.trial_id
            self.reporter.info(
                f"    [bold]final submission[/bold] {graded.trial_id} (best valid {graded.valid_score:.3f}): "
                f"graded {graded.score:.3f}"
            )
            self.track_final(state, graded, update)
        return state.model_copy(update=update), update

    def track_final(self, state: LoopState, graded: TrialRecord, update: dict[str, Any]) -> None:
        """MLflow learns of the end's submission as of any other: the parent's score over submissions gets its
        point, the trial's run its public score and its outcome (graded, no longer kept back)."""
        parent = state.mlflow_parent
        if not parent or graded.score is None:
            return
        step = int(update["submissions"])
        live = run_figures(state.baseline_score or 0.0, update.get("best_score", state.best_score))
        if not self.tracker.has_metric_at(parent, "score", step):
            self.tracker.log_metrics(
                parent,
                {
                    "score": graded.score,
                    "best_score": live.best,
                    "submission_count": step,
                    "improvement": live.improvement,
                },
                step=step,
            )
        self.tracker.mark_graded(parent, self.paths.run_id, self.config.benchmark, graded)
