"""The run driver: start (or resume) a research run, drive its graph to the end through approval pauses, and stop
it cleanly on Ctrl-C or SIGTERM, leaving it resumable. The nodes themselves are `agent.loop.nodes.Research`."""

from __future__ import annotations

import contextlib
from typing import Any

from langchain_core.runnables import RunnableConfig
from langgraph.types import Command

from agent.loop import approvals
from agent.loop.context import build_context
from agent.loop.ending import finalize
from agent.loop.graph import LoopState, build_graph
from agent.loop.nodes import Research
from agent.loop.startup import start_run
from agent.processes import RunInterrupted, interrupts_as_exceptions
from agent.results import ended_early, error_line, interrupted_before_start, print_summary
from agent.run import Reporter, RunConfig, RunPaths, end_leftovers
from agent.status import open_checkpoints


def execute(
    config: RunConfig, *, resume_run_id: str | None = None, reporter: Reporter | None = None
) -> dict[str, Any]:
    """Run (or resume) a research run to its end. Returns the run's summary.

    Ctrl-C and SIGTERM at any point stop every child, keep the workspace and logs, write the results row with
    success false, and leave the run resumable.
    """
    started = start_run(config, resume_run_id)
    config, paths = started.config, started.paths
    reporter = reporter or Reporter(paths.log_file, quiet=config.quiet)
    research: Research | None = None
    graph: Any = None  # the compiled graph, checkpointed to the run's SQLite file
    try:
        with interrupts_as_exceptions():
            reporter.info(
                f"[bold]rlloop[/bold] run {paths.run_id}: {config.base_model} on {config.benchmark}"
            )
            research = Research(build_context(started, reporter))
            if (
                started.came_back
            ):  # trials, a grader an earlier, killed process left: ended and named in the log
                end_leftovers(research.sandbox, paths, reporter)
            graph = build_graph(research).compile(checkpointer=open_checkpoints(paths.checkpoints_db))
            values = _drive(graph, research, resume=bool(resume_run_id))
    except (RunInterrupted, KeyboardInterrupt) as exc:
        return _stop(research, graph, config, paths, reporter, str(exc) or "SIGINT")
    except BaseException as exc:
        if research is not None:
            research.sandbox.cleanup(paths.labels)
            research.close()
        if isinstance(exc, Exception):  # died on an error: failed, with it, wherever runs are listed
            reason = error_line(exc)
            reporter.error(f"the run failed: {reason}")
            with contextlib.suppress(Exception):  # the error itself is what the caller must see
                isolation = research.isolation if research is not None else None
                ended_early(config, paths, status="failed", reason=reason, isolation=isolation)
        reporter.close()
        raise
    research.close()
    summary = dict(values.final)
    print_summary(reporter, values.model_dump(mode="json"), summary)
    reporter.close()
    return summary


def _stop(
    research: Research | None, graph: Any, config: RunConfig, paths: RunPaths, reporter: Reporter, reason: str
) -> dict[str, Any]:
    """Interrupted: stop the trials and the grader, write the results row (success false), say how to resume."""
    reporter.warn(f"interrupted ({reason}): stopping trials, keeping the workspace and logs")
    if research is None:
        summary = interrupted_before_start(config, paths, reason)
    else:
        research.sandbox.cleanup(paths.labels)
        summary = finalize(
            research, _last_state(graph, paths), success=False, status="interrupted", reason=reason
        )
        research.close()
    reporter.info(f"resume with: rlloop resume {paths.run_id}")
    reporter.close()
    return summary


def _thread(paths: RunPaths) -> RunnableConfig:
    """The run's one thread in the checkpointer."""
    return {"configurable": {"thread_id": paths.run_id}, "recursion_limit": 10_000}


def _last_state(graph: Any, paths: RunPaths) -> LoopState:
    """The last checkpointed state (empty before the graph was built)."""
    if graph is None:
        return LoopState()
    return LoopState.model_validate(graph.get_state(_thread(paths)).values)


def _drive(graph: Any, research: Research, *, resume: bool) -> LoopState:
    """Invoke the graph until it ends, pausing at approval interrupts until a decision arrives."""
    paths, reporter = research.paths, research.reporter
    thread = _thread(paths)
    existing = graph.get_state(thread)
    payload: Any = {"run_id": paths.run_id}
    if resume and existing.values:
        payload = _recover_current(LoopState.model_validate(existing.values), research)
    while True:
        graph.invoke(payload, thread)
        snapshot = graph.get_state(thread)
        pending = [i for task in snapshot.tasks for i in task.interrupts]
        if not pending:
            return LoopState.model_validate(snapshot.values)
        trial = pending[0].value["trial"]
        reporter.info(
            f"    waiting for approval of {trial['trial_id']}: `rlloop approve {paths.run_id}` "
            "(or --reject REASON), or the service's approvals page"
        )
        decision = approvals.wait_for_decision(paths.run_dir, trial["trial_id"])
        payload = Command(resume=decision.model_dump(mode="json"))


def _recover_current(state: LoopState, research: Research) -> Any:
    """A trial in flight when the run died is restarted from a clean folder (its half checkpoint is removed)."""
    research.reporter.info(f"resuming after {len(state.trials)} finished trials")
    current = state.current
    if current is not None and current.status in ("pending", "running"):
        # a concurrent step (agent.loop.concurrency): a finished trial is read back, not retrained
        if state.queue:
            names = ", ".join([current.trial_id, *(t.trial_id for t in state.queue)])
            research.reporter.warn(f"{names} were interrupted mid-step; the unfinished ones will restart")
        else:
            research.reporter.warn(f"{current.trial_id} was interrupted mid-trial; it will be restarted")
    return None
