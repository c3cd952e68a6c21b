"""Run a sweep to its end: queue every unfinished combination, keep the manifest and the live table current,
group the runs in MLflow, and stop cleanly (runs resumable) on Ctrl-C or SIGTERM."""

from __future__ import annotations

import signal
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from types import FrameType
from typing import Any

from rich.console import Console
from rich.live import Live
from rich.markup import escape

from agent.run import ensure_home
from agent.sweeps import manifest as manifests
from agent.sweeps.executors import Executor, make_executor
from agent.sweeps.manifest import Entry, Manifest
from agent.sweeps.outcomes import Outcome
from agent.sweeps.progress import sweep_table
from agent.sweeps.spec import SweepSpec
from agent.sweeps.tracking import SweepTracker
from agent.sweeps.worker import WorkerPayload


class SweepInterrupted(Exception):
    """SIGTERM to the sweep driver."""


def run_sweep(
    spec: SweepSpec,
    home: Path,
    *,
    console: Console | None = None,
    executor: Executor | None = None,
    refresh_s: float = 1.0,
) -> Manifest:
    """Run (or continue) the sweep; returns its manifest. Finished runs are never repeated."""
    home = ensure_home(home)
    console = console or Console(highlight=False)
    manifest = manifests.open_manifest(home, spec)
    executor = executor or make_executor(spec)
    check_storage = getattr(executor, "check_storage", None)
    if callable(check_storage):  # runs on other machines: each must see the sweep's folder, before any starts
        try:
            check_storage(manifests.sweeps_dir(home) / spec.sweep_id, home)
        except BaseException:
            executor.close()
            raise
    tracker = SweepTracker(home)
    manifest.mlflow_run_id = tracker.start(manifest)
    manifests.save(home, manifest)
    queue = [e for e in manifest.entries.values() if e.status != "finished"]
    in_flight: dict[Future[dict[str, Any]], Entry] = {}
    previous = _sigterm_as_exception()
    try:
        with Live(
            sweep_table(home, manifest), console=console, refresh_per_second=2, transient=False
        ) as live:
            while queue or in_flight:
                while queue and len(in_flight) < spec.concurrency:
                    entry = queue.pop(0)
                    entry.status, entry.error = "running", None
                    entry.attempts += 1
                    entry.started_at, entry.finished_at = time.time(), None
                    payload = WorkerPayload(
                        home=home,
                        sweep_id=spec.sweep_id,
                        run_id=entry.run_id,
                        combination=entry.combination,
                        spec=spec,
                    )
                    in_flight[executor.submit(payload)] = entry
                    manifests.save(home, manifest)
                for future in [f for f in in_flight if f.done()]:
                    entry = in_flight.pop(future)
                    outcome = Outcome.model_validate(future.result())
                    _settle(home, manifest, entry, outcome, tracker)
                    _say_agent_failure(live.console, entry, outcome)
                live.update(sweep_table(home, manifest))
                time.sleep(refresh_s if in_flight else 0)
            manifest.status = (
                "finished"
                if all(e.status == "finished" for e in manifest.entries.values())
                else "interrupted"
            )
            live.update(sweep_table(home, manifest))
    except (KeyboardInterrupt, SweepInterrupted):
        console.print(
            "[yellow]interrupted:[/yellow] stopping the runs in flight; re-run with the same --sweep-id to continue"
        )
        executor.interrupt()
        for future, entry in in_flight.items():
            try:
                outcome = Outcome.model_validate(future.result(timeout=120))
            except Exception:
                outcome = Outcome(
                    run_id=entry.run_id, status="interrupted", action="started", error="sweep interrupted"
                )
            _settle(home, manifest, entry, outcome, tracker)
        manifest.status = "interrupted"
    finally:
        _restore_sigterm(previous)
        executor.close()
        manifests.save(home, manifest)
        tracker.finish(manifest, [manifests.manifest_path(home, manifest.sweep_id)])
    return manifest


def _settle(home: Path, manifest: Manifest, entry: Entry, outcome: Outcome, tracker: SweepTracker) -> None:
    entry.status = outcome.status
    entry.error = outcome.error
    entry.finished_at = time.time()
    if outcome.summary:
        manifests.entry_from_summary(entry, outcome.summary)
    entry.mlflow_parent = tracker.tag_run(manifest, entry) or entry.mlflow_parent
    manifests.save(home, manifest)
    tracker.progress(manifest)


def _say_agent_failure(console: Console, entry: Entry, outcome: Outcome) -> None:
    """An external agent that failed: its error line and its log's last lines, above the live table."""
    if not entry.agent_error:
        return
    console.print(f"[red]{escape(entry.run_id)}: agent failed:[/red] {escape(entry.agent_error)}")
    tail = outcome.summary.get("agent_log_tail") or []
    for line in tail:
        console.print(f"  [dim]| {escape(str(line))}[/dim]")


def _sigterm_as_exception() -> Any:
    if threading.current_thread() is not threading.main_thread():
        return None

    def handler(signum: int, frame: FrameType | None) -> None:
        raise SweepInterrupted(signal.Signals(signum).name)

    return signal.signal(signal.SIGTERM, handler)


def _restore_sigterm(previous: Any) -> None:
    if previous is not None and threading.current_thread() is threading.main_thread():
        signal.signal(signal.SIGTERM, previous)
