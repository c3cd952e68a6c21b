"""Proposed training code is checked before its trial is paid for: it must parse and pass a smoke run (a few steps
on a few examples, in the sandbox). A failure goes back to the proposer to repair, up to the configured depth."""

from __future__ import annotations

from agent.core import TrialRecord
from agent.loop.resources import RunResources
from agent.loop.trials import TrialSetupError, checkpoint_ready
from agent.proposers import check_code


def check_and_repair(run: RunResources, record: TrialRecord, trials: list[TrialRecord]) -> str | None:
    """None once the code (perhaps repaired, in `record.proposal`) passes; else why it failed, in one line."""
    attempts = run.config.llm_max_repair_attempts
    for attempt in range(attempts + 1):
        assert record.proposal.train_py is not None
        failure = check_code(record.proposal.train_py)
        if failure is None:
            failure = smoke_run(run, record, trials)
        if failure is None:
            if attempt:
                run.reporter.info(f"    code repaired after {attempt} attempt(s); smoke run passed")
            return None
        run.reporter.warn(
            f"{record.trial_id}: proposed code failed its check: {failure.splitlines()[-1][:200]}"
        )
        if attempt == attempts:
            return _failed(failure)
        try:
            repaired = run.proposer.repair(record.proposal, failure)
        except Exception as exc:
            return f"code failed its check and could not be repaired: {exc}"
        if repaired is None:  # this proposer cannot repair code (agent.proposers.base.ProposerBase)
            return _failed(failure)
        record.proposal = repaired
    return "code failed its check"


def _failed(failure: str) -> str:
    return f"code failed its check: {failure.strip().splitlines()[-1][:300]}"


def smoke_run(run: RunResources, record: TrialRecord, trials: list[TrialRecord]) -> str | None:
    """Train the proposal briefly in trials/<id>-smoke; None if it wrote a checkpoint, else why not and its log."""
    smoke_id = f"{record.trial_id}-smoke"
    try:
        limits = run.trial_limits(run.config.smoke_timeout)
        request = run.trial_request(record.proposal, smoke_id, trials, limits)
    except TrialSetupError as exc:
        return str(exc)
    request.env["RLLOOP_SMOKE"] = "1"
    with run.reporter.watching(f"{record.trial_id} smoke run", request.log_path):
        result = run.sandbox.run(request)
    smoke_output = str(run.paths.trial_output(smoke_id).relative_to(run.paths.run_dir))
    if result.ok and checkpoint_ready(run.paths, smoke_output):
        return None
    why = result.reason() if not result.ok else "the smoke run wrote no checkpoint to OUTPUT_DIR"
    return f"smoke run {why}\n--- log tail ---\n{result.log_tail[-3000:]}"
