"""`--trial-concurrency K`: K trials of one run train at once, each in its own sandbox request.

One graph step proposes up to K trials (`more_proposals`: each proposal sees the ones before it as pending
children in the tree, so the policy picks a different parent or move each time), trains them together
(`train_batch`: one thread per trial, each calling `sandbox.run` on its own request with its share of the CPUs and
GPUs), and leaves the rest of the batch in the state's `queue`. The next steps then validate, submit and record the
queued trials one by one in trial-id order, so the checkpointed state after the batch has the shape of K
sequential steps. Limits:

- never more trials than the run has left (`loop_n`), nor more than the compute budget has room for (each trial's
  estimated cost is reserved before launch);
- a trial that finished before a kill -9 left `trials/<id>/outcome.json` beside its checkpoint: on resume it is
  read back, not trained again; an unfinished one trains once more from a clean folder;
- the grader's cap holds: a queued trial is not submitted once the cap is reached (`Research.validate`).

K = 1 goes through none of this: the loop is exactly the sequential one.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any

from agent.core import Proposal, ProposalContext, TrialRecord
from agent.loop.context import RunContext
from agent.loop.resources import RunResources
from agent.loop.trials import TrialSetupError, verify_checkpoint, with_model_defaults
from agent.processes import failpoint
from agent.run import RunPaths
from sandbox import untrusted
from sandbox.base import SandboxRequest
from tasks.atomic import atomic_write_json

if TYPE_CHECKING:
    from agent.run import RunConfig
    from sandbox.devices import DevicePlan

OUTCOME = "outcome.json"


def width(config: RunConfig, trials_done: int, submissions_left: int) -> int:
    """How many trials the next step may launch: K, no more than the run has left (nor, under submit=all, where
    each checkpoint is graded, than submissions left), and 1 under an approval gate (each proposal waits for its
    own decision)."""
    if config.trial_concurrency <= 1 or config.approval != "never":
        return 1
    left = config.loop_n - trials_done
    if config.submit == "all":
        left = min(left, submissions_left)
    return max(1, min(config.trial_concurrency, left))


def trial_cpus(cpus: float | None, k: int) -> float | None:
    """One trial's CPU share when k train at once: its own limit (the user's --trial-cpus), else this machine's
    cores / k."""
    if cpus is not None or k <= 1:
        return cpus
    return max(1.0, (os.cpu_count() or 1) / k)


def split_request(
    request: SandboxRequest, k: int, slot: int, devices: DevicePlan, schedules_resources: bool = False
) -> SandboxRequest:
    """`request` (made within the trial's limits) as the `slot`-th of k concurrent trials: its CPU share of this
    machine (and torch/OpenMP threads to match) and the GPUs after its siblings' in the pool (slot 0 keeps the free
    ones the plan chose; the lease still serialises any overlap). Neither on a backend that `schedules_resources`
    itself (ray: its scheduler places each trial on a node with room)."""
    if k <= 1:
        return request
    update: dict[str, Any] = {}
    if not schedules_resources:
        cpus = trial_cpus(request.cpus, k)
        threads = str(max(1, int(cpus or 1)))
        update["cpus"] = cpus
        update["env"] = {"OMP_NUM_THREADS": threads, "MKL_NUM_THREADS": threads, **request.env}
    pool = [int(g) for g in devices.trial_pool]
    gpus = request.gpus
    if gpus and gpus[0] in pool and len(pool) >= len(gpus) * 2 and not schedules_resources:
        start = pool.index(gpus[0]) + slot * len(gpus)
        update["gpus"] = [pool[(start + i) % len(pool)] for i in range(len(gpus))]
    return request.model_copy(update=update)


def _same(a: Proposal, b: Proposal) -> bool:
    return (a.recipe, a.init_from, a.hyperparameters, a.train_py) == (
        b.recipe,
        b.init_from,
        b.hyperparameters,
        b.train_py,
    )


def more_proposals(
    run: RunResources, context: ProposalContext, first: TrialRecord, k: int, *, reserved_s: float
) -> list[TrialRecord]:
    """Up to k - 1 more trials for this step, each proposed with the batch so far as pending trials. The batch
    ends early (never failing the step) when the proposer has nothing more, repeats a pending proposal, fails, or
    the compute budget has no room for another trial's estimated cost."""
    batch = [first]
    limit = run.budget.limits.max_compute_s
    room = None if limit is None else limit - run.budget.spent().compute_s - reserved_s
    while len(batch) < k:
        index = first.index + len(batch)
        trial_id = f"t{index:02d}"
        seen = context.model_copy(
            update={"trials": [*context.trials, *batch], "trials_left": context.trials_left - len(batch)}
        )
        run.proposer.attach_run(run, trial_id)
        try:
            proposal = run.proposer.propose(seen)
        except Exception as exc:  # noqa: BLE001 - SearchDone, an LLM error: the next sequential step will see it
            run.reporter.info(
                f"    [dim]{len(batch)} trial(s) in this step ({type(exc).__name__}: {exc})[/dim]"
            )
            break
        proposal = with_model_defaults(proposal, run.context.fit)
        if any(_same(proposal, b.proposal) for b in batch):
            break
        cost = proposal.estimated_cost_s or _typical_cost(context.trials)
        if room is not None and cost is not None:
            if cost > room:
                break
            room -= cost
        run.reporter.info(
            f"[bold cyan]{trial_id}[/bold cyan] {proposal.recipe} from {proposal.init_from or 'base model'} (concurrent)"
        )
        run.reporter.info(f"    [dim]{proposal.hypothesis}[/dim]")
        batch.append(TrialRecord(trial_id=trial_id, index=index, proposal=proposal, status="pending"))
    return batch[1:]


def _typical_cost(trials: list[TrialRecord]) -> float | None:
    done = [t.duration_s for t in trials if t.status == "succeeded" and t.duration_s > 0]
    return sum(done) / len(done) if done else None


def outcome_file(paths: RunPaths, trial_id: str) -> Path:
    return paths.trial_dir(trial_id) / OUTCOME


def finished(paths: RunPaths, record: TrialRecord) -> TrialRecord | None:
    """The outcome a trial of this batch reached before the process died, if it wrote one (and, when it
    succeeded, its checkpoint is still there); None: it has to train (again)."""
    try:  # the host's own file, read back without following anything
        done = TrialRecord.model_validate_json(
            untrusted.read_text(paths.trials_dir, f"{record.trial_id}/{OUTCOME}")
        )
    except (OSError, ValueError):
        return None
    if done.proposal != record.proposal:
        return None
    if done.status == "succeeded":
        if not done.checkpoint:
            return None
        try:
            verify_checkpoint(done, paths)  # still the checkpoint sealed when it ended
        except TrialSetupError:
            return None
    return done


def train_batch(
    run: RunContext,
    records: list[TrialRecord],
    train: Callable[[TrialRecord, int, int], TrialRecord],
) -> list[TrialRecord]:
    """Train `records` at once (`train(record, k, slot)` trains one), in threads; each outcome is written to its
    trial folder the moment it is known. Returns the outcomes in trial-id order."""
    paths, k = run.paths, len(records)
    results: list[TrialRecord | None] = [None] * k
    errors: list[BaseException] = []

    def one(slot: int, record: TrialRecord) -> None:
        try:
            done = finished(paths, record)
            if done is not None:
                run.reporter.info(
                    f"    {record.trial_id} finished before the interruption: not trained again"
                )
                results[slot] = done
                return
            outcome_file(paths, record.trial_id).unlink(missing_ok=True)
            result = train(record, k, slot)
            atomic_write_json(outcome_file(paths, record.trial_id), result.model_dump(mode="json"))
            results[slot] = result
            failpoint("trained", record.index)  # this trial's outcome is on disk, the step not checkpointed
        except BaseException as exc:  # noqa: BLE001 - re-raised in the graph's thread below
            errors.append(exc)

    threads = [
        threading.Thread(target=one, args=(i, r), name=f"trial-{r.trial_id}") for i, r in enumerate(records)
    ]
    names = ", ".join(r.trial_id for r in records)
    run.reporter.info(f"    {names}: training {k} at once")
    with run.reporter.watching(
        f"{names} training ({k} at once)", paths.trial_dir(records[0].trial_id) / "log.txt"
    ):
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
    if errors:
        raise errors[0]
    return [r for r in results if r is not None]
