"""Warm trials: the next trial's sandbox and interpreter started while the host still works on the previous one.

A trial's start-up is mostly imports (torch, transformers, TRL: 6-11 s of CPU on these machines), paid again by every
trial. The loop knows a trial will follow long before it knows which: as soon as one trial starts training (on one
thread: a core is left idle), `launch` starts the next trial's own sandbox, exactly as it will train (its workspace,
base model, its own /trial and /output, the run's limits), running `python -m trainers.warm`, which imports the
trainer library at a lower priority and waits. Its start checkpoint is a host folder (`starts/<trial>`) shown as /model and
still empty. When the proposal is final, `go` links the start checkpoint's files into that folder (checked against
its digest, as for any start), writes the trial's record and config, and writes the go file: the trial's clock starts
then, and the trial trains in that interpreter. What the warm-up overlapped is what the host was doing anyway.

Nothing is shared between trials: each warm sandbox is the trial's own, with the folders it would have had; the
host writes only into folders it made (the go file and the config into the trial's read-only /trial, the links into
/model). A warm sandbox that cannot take the proposal (a recipe plugin that must be mounted, a start checkpoint that
cannot be linked, a sandbox that died) is cancelled and the trial starts afresh, as without warm trials. Warm trials
run on the local and Docker backends, one trial at a time, without GPUs (a warm sandbox would hold its GPU lease
while the grader waits for it).
"""

from __future__ import annotations

import shutil
import threading
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from agent.loop.limits import TrialLimits
from agent.loop.trials import PreparedTrial, fresh_output, plugin_mounts, python_for, sandbox_request
from agent.run import RunPaths
from sandbox import untrusted
from sandbox.base import Sandbox, SandboxRequest, SandboxResult, maps_paths
from sandbox.view import TrialView
from tasks.atomic import atomic_write_json
from trainers.warm import RECIPES_ENV

GO_FILE = "go.json"
STARTS_DIR = "starts"
WARM_BACKENDS = ("local", "docker")
WAIT_MAX_S = 3600.0  # as trainers.warm: a go that never comes ends the warm sandbox by itself
CANCEL_WAIT_S = 30.0


@dataclass
class WarmTrial:
    """One trial's sandbox, started and importing, waiting for its go."""

    trial_id: str
    start: Path  # the host folder the trial sees as /model (its start checkpoint, linked in at go)
    trial_dir: Path
    request: SandboxRequest
    launched: float = field(default_factory=time.time)
    result: SandboxResult | None = None
    error: BaseException | None = None
    thread: threading.Thread | None = None

    def alive(self) -> bool:
        return self.thread is not None and self.thread.is_alive()


def supported(sandbox: Sandbox, *, gpus: int, concurrency: int) -> bool:
    """Whether trials of this run can start warm: one at a time, no GPU, a local or Docker sandbox."""
    return sandbox.name in WARM_BACKENDS and gpus == 0 and concurrency == 1


def launch(
    sandbox: Sandbox,
    *,
    trial_id: str,
    paths: RunPaths,
    base_model: Path,
    limits: TrialLimits,
    recipes: list[str],
) -> WarmTrial:
    """Start `trial_id`'s sandbox now, importing the trainer library; it trains once `go` is called (`limits`: the
    run's, which the trial's own, known at `go`, may narrow: `wait` holds it to them)."""
    trial_dir = fresh_output(paths, trial_id)
    (trial_dir / GO_FILE).unlink(missing_ok=True)
    start = paths.run_dir / STARTS_DIR / trial_id
    shutil.rmtree(start, ignore_errors=True)  # the host's own folder, from a warm trial that never went
    untrusted.host_dir(start, anchor=paths.run_dir)
    host = TrialView(
        workspace=paths.workspace,
        model=start,
        base=base_model,
        trial=trial_dir,
        output=paths.trial_output(trial_id),
    )
    seen = host.seen(maps_paths(sandbox))
    command = [python_for(sandbox), "-m", "trainers.warm", str(seen.trial / GO_FILE)]
    request = sandbox_request(
        PreparedTrial(command, host, seen),
        trial_id=trial_id,
        paths=paths,
        limits=replace(limits, timeout_s=limits.timeout_s + WAIT_MAX_S),
    )
    request = request.model_copy(update={"env": {**request.env, RECIPES_ENV: ",".join(recipes)}})
    warm = WarmTrial(trial_id=trial_id, start=start, trial_dir=trial_dir, request=request)

    def run() -> None:
        try:
            warm.result = sandbox.run(request)
        except BaseException as exc:  # noqa: BLE001 - reported to `go`, which starts the trial afresh
            warm.error = exc

    warm.thread = threading.Thread(target=run, name=f"warm-{trial_id}", daemon=True)
    warm.thread.start()
    return warm


def go(warm: WarmTrial, prepared: PreparedTrial, started: float, *, sandbox: Sandbox) -> bool:
    """Hand the warm sandbox its command (the trial's clock started at `started`); False when it cannot take it
    (it is cancelled: start the trial afresh). `prepared` was made with `warm_start=warm.start`."""
    plugins, _ = plugin_mounts(prepared.command)
    if not warm.alive() or prepared.command[0] != warm.request.command[0] or plugins:
        cancel(warm, sandbox)
        return False
    atomic_write_json(warm.trial_dir / GO_FILE, {"argv": prepared.command[1:], "started_at": started})
    return True


def wait(warm: WarmTrial, started: float, *, sandbox: Sandbox, timeout_s: float) -> SandboxResult | None:
    """The trial's result once it ends, ended as timed out after `timeout_s` from `started` (the trial's own limit,
    which the warm sandbox's deadline, set before it was known, is not); None if its sandbox broke."""
    assert warm.thread is not None
    warm.thread.join(max(0.0, started + timeout_s - time.time()))
    timed_out = warm.alive()
    if timed_out:
        sandbox.cleanup(warm.request.labels)
        warm.thread.join()
    shutil.rmtree(warm.start, ignore_errors=True)  # links to the start checkpoint, which stays where it was
    if warm.error is not None or warm.result is None:
        return None
    return warm.result.model_copy(update={"timed_out": True}) if timed_out else warm.result


def cancel(warm: WarmTrial, sandbox: Sandbox | None = None, *, forget: bool = False) -> None:
    """End a warm sandbox that will not train (its go says cancel) and remove what it was given; `forget`: its
    trial folder too (the run ends without that trial)."""
    if warm.alive():
        atomic_write_json(warm.trial_dir / GO_FILE, {"cancel": True})
        assert warm.thread is not None
        warm.thread.join(CANCEL_WAIT_S)
        if warm.alive() and sandbox is not None:  # stuck in its imports: ended like any leftover of the trial
            sandbox.cleanup(warm.request.labels)
            warm.thread.join(CANCEL_WAIT_S)
    (warm.trial_dir / GO_FILE).unlink(missing_ok=True)
    shutil.rmtree(warm.start, ignore_errors=True)
    if forget and not warm.alive():
        shutil.rmtree(warm.trial_dir, ignore_errors=True)  # fd-based: never follows a link inside
