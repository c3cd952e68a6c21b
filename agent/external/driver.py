"""Run an AutoRL-Bench-style agent folder, unchanged, as a whole inside the sandbox with only the grader reachable.

An agent folder holds `config.yaml` (`name`, `start`, optional `env_vars`, `description`) and the `start` script.
The script runs as `bash <folder>/<start>` (as AutoRL-Bench's run.py runs it) with `env_vars` and then
TASK, BASE_MODEL, WORKSPACE, MODEL_PATH, DATA_PATH, OUTPUT_DIR and GRADING_SERVER_URL set, in the agent image
(`rlloop/agent:cpu`: AutoRL-Bench's agent packages) when the sandbox is Docker. It sees its workspace at /workspace,
laid out as AutoRL-Bench lays it out (`data/train.jsonl` in the dataset's own fields, `code/`, `output/`,
`models/<name>`, `description.md`, `instructions.md`, `run_meta.json`; docs/autorl-bench.md). It may write only that
folder (the run's `agent/`); the data, the instructions, the base model and run_meta.json (the host's, in
`agent-meta/`, reached through a link the host put there first) are mounted into it read-only, and it sees no host
path. Its submissions are read from its folder by the grader's copy (`grader.checkpoint.snapshot_submission`), never
followed. Its exit code is its success flag; what it submitted is read back from the grader, never from the agent. An agent that fails is reported with its error line
(`agent.external.agent_failure`) on the console, in summary.json, MLflow and the sweep's table and report.

The agent folder: `agent_folder`; the request the sandbox runs: `agent_request`; its sandbox and image:
`agent_image`; the grader's token and the model reached through one address: `relay` (`TokenRelay`) and `gateway`.
"""

from __future__ import annotations

import contextlib
import time
from pathlib import Path
from typing import Any

from rich.markup import escape

from agent.external import named, posttrainbench
from agent.external.agent_failure import AgentFailure, diagnose
from agent.external.agent_folder import ExternalAgentError, ExternalAgentSpec, load_agent, named_agent_problem
from agent.external.agent_image import agent_sandbox
from agent.external.agent_request import INSIDE, agent_request
from agent.external.autorl import AutoRLAdapter, init_run_meta, update_run_meta
from agent.external.gateway import ModelGateway
from agent.external.gateway_setup import GatewayConfig
from agent.external.llm_traces import CallTraces
from agent.external.relay import TokenRelay
from agent.llm import Budget, BudgetLimits, PriceTable
from agent.processes import RunInterrupted, interrupts_in_main_thread
from agent.results import (
    FINISH_RESERVE_S,
    close_tracking,
    final_figures,
    read_final,
    result_row,
    write_ending,
)
from agent.run import (
    GraderProcess,
    Reporter,
    RunConfig,
    RunPaths,
    locate_run,
    prepare_workspace,
    record_run,
)
from agent.tracking import Tracker
from sandbox.base import Sandbox, SandboxResult, maps_paths
from sandbox.registry import isolation_of
from tasks.atomic import atomic_write_json

AGENT_ERROR_TAG = "rlloop.agent_error"  # MLflow tag on the run's parent: "agent failed: <error line>"
AGENT_LLM_LIMIT_TAG = "rlloop.agent_llm_limit"  # MLflow tag: the cap that refused the agent's model calls


def run_external(
    config: RunConfig,
    agent_dir: str | Path,
    *,
    resume_run_id: str | None = None,
    reporter: Reporter | None = None,
    sandbox: Sandbox | None = None,
) -> dict[str, Any]:
    """Run (or re-run, keeping the grader's store, on resume) an external agent. Returns the run's summary, shaped
    like `agent.loop.driver.execute`'s: the results.csv row plus `status`, `stop_reason`, `grader`, `agent_exit_code`."""
    from agent.run import check_base_model, resolve_base_model
    from grader.benchmarks import get_benchmark

    spec = load_agent(agent_dir)
    problem = named_agent_problem(spec, config)
    if problem is not None:
        raise ExternalAgentError(problem)
    paths = locate_run(config, resume_run_id)
    run_id, home = paths.run_id, paths.home
    benchmark = get_benchmark(config.benchmark)
    record_run(config, paths)
    reporter = reporter or Reporter(paths.log_file, quiet=config.quiet)
    atomic_write_json(paths.run_dir / "external.json", spec.model_dump(mode="json"))
    base_model = check_base_model(
        resolve_base_model(config.base_model, home), prompt_format=config.prompt_format
    )  # the agent's sandbox mounts it as trials do: refused here, before the grader scores it
    prepare_workspace(paths, benchmark, layout="autorl-bench")
    sandbox = sandbox or agent_sandbox(config, reporter, coding_agents=named.is_named_folder(spec.folder))
    if not maps_paths(sandbox):
        raise ExternalAgentError(
            f"the {sandbox.name} sandbox cannot show the agent its folders at fixed paths (/workspace, ...); "
            "run external agents with --sandbox docker or local (namespaces)"
        )
    reporter.info(
        f"[bold]rlloop[/bold] external agent {spec.name!r} on {config.benchmark} ({run_id}), {sandbox.name}"
    )
    gateway = open_gateway(config, paths, reporter)  # before the grader starts: a missing key fails at once
    started = time.monotonic()
    grader = agent_grader(config, paths, base_model, isolation_of(sandbox))
    tracker = Tracker(config.tracking_uri, home / "mlartifacts")
    relay: TokenRelay | None = None
    traces: CallTraces | None = None
    final_model: str | None = None  # PostTrainBench agents: what became of final_model/
    result: SandboxResult | None = None
    failure: AgentFailure | None = None
    status, reason = "finished", "the agent exited"
    try:
        health = grader.start()
        baseline = float((health.get("baseline") or {}).get("score", health.get("baseline_score")) or 0.0)
        reporter.info(f"baseline {float(baseline):.3f}")
        parent = tracker.start_parent(
            run_id,
            config.benchmark,
            {**config.model_dump(mode="json", exclude={"home"}), "proposer": "external", "agent": spec.name},
        )
        tracker.set_tags(parent, {"rlloop.agent": spec.name, "rlloop.agent_dir": str(spec.folder)})
        tracker.log_metrics(parent, {"baseline_score": float(baseline)}, step=0)
        if gateway is not None:
            traces = CallTraces(tracker, benchmark=config.benchmark, run_id=run_id, parent=parent)
            gateway.on_call = traces
        relay = TokenRelay(
            grader.url,
            grader.token,
            adapter=AutoRLAdapter(paths.agent_dir, config.benchmark, paths.run_meta_json, inside=INSIDE),
            gateway=gateway,
        )
        timeout_s = max(30.0, config.timeout - FINISH_RESERVE_S - (time.monotonic() - started))
        init_run_meta(paths.run_meta_json, timeout_s)
        request = agent_request(
            spec,
            paths=paths,
            config=config,
            base_model=base_model,
            grader_url=relay.url,
            timeout_s=timeout_s,
            gateway=gateway,
        )
        with interrupts_in_main_thread(), reporter.watching(f"agent {spec.name}", request.log_path):
            result = sandbox.run(request)
        if spec.contract == posttrainbench.CONTRACT and not result.interrupted:
            final_model = posttrainbench.submit_final_model(relay.url, paths.agent_dir)
            reporter.info(escape(final_model))
        failure = diagnose(result, request.log_path)
        stopped = result.timed_out or result.oom_killed or result.output_limit_exceeded
        if failure is not None and gateway is not None and gateway.stop_reason and not stopped:
            # the host knows why the agent's model stopped answering: that, not the agent's last words, is the cause
            error = f"its model calls were refused: {gateway.stop_reason}"
            failure = failure.model_copy(update={"error": error, "reason": f"agent failed: {error}"})
        if result.interrupted:
            status, reason = "interrupted", "the agent was interrupted"
        elif failure is not None:
            reason = failure.reason
            report_failure(reporter, spec, failure, request.log_path)
        reporter.info(f"agent ended: {escape(reason)} (log: {request.log_path})")
    except (KeyboardInterrupt, RunInterrupted) as exc:
        status, reason = "interrupted", str(exc) or "SIGINT"
        sandbox.cleanup(paths.labels)
    finally:
        if relay is not None:
            relay.close()
        if gateway is not None:
            gateway.close()
        if traces is not None:
            traces.close()
        with contextlib.suppress(OSError):
            update_run_meta(paths.run_meta_json, end_time=int(time.time()))
    try:
        summary = _finalize(
            config,
            paths,
            spec,
            grader,
            tracker,
            reporter,
            result,
            status,
            reason,
            started,
            isolation_of(sandbox),
            failure,
            gateway,
            final_model,
        )
    finally:
        grader.stop()
        reporter.close()
    return summary


def open_gateway(config: RunConfig, paths: RunPaths, reporter: Reporter) -> ModelGateway | None:
    """The run's model gateway (None without `agent_llm_base_url`), metered against the run's budget ledger (a
    resumed run goes on from what it spent), every call in the transcript; `run_external` adds the MLflow traces
    once the run's parent exists. Raises `GatewayError` when the key's variable is not set."""
    settings = GatewayConfig.from_run(config)
    if settings is None:
        return None
    prices = PriceTable.from_env()
    if config.llm_price_file is not None:
        prices = prices.merged(PriceTable.from_file(config.llm_price_file))
    limits = BudgetLimits(max_usd=config.llm_max_usd, max_tokens=config.llm_max_tokens)
    gateway = ModelGateway(
        settings,
        budget=Budget(limits, ledger=paths.budget_ledger),
        transcript=paths.agent_llm_transcript,
        prices=prices,
    )
    allowed = ", ".join(settings.models) or "any model"
    reporter.info(
        f"agent LLM: {escape(settings.base_url)} ({escape(allowed)}) through the metered gateway; transcript "
        f"{paths.agent_llm_transcript}"
    )
    return gateway


def gateway_summary(gateway: ModelGateway, paths: RunPaths) -> dict[str, Any]:
    """summary.json's `agent_llm`: what the agent's model calls cost, why any were refused, where they are."""
    spent = gateway.budget.spent()
    return {
        "calls": spent.llm_calls,
        "prompt_tokens": spent.prompt_tokens,
        "completion_tokens": spent.completion_tokens,
        "tokens": spent.tokens,
        "cost_usd": round(spent.usd, 6),
        "refused_over_cap": gateway.refusals,
        "stop_reason": gateway.stop_reason,
        "models": list(gateway.config.models),
        "transcript": str(paths.agent_llm_transcript),
    }


def agent_grader(config: RunConfig, paths: RunPaths, base_model: Path, isolation: str) -> GraderProcess:
    """The agent's grader, configured as a research run's is (prompt format included: an agent on a chat run is
    graded with chat prompts); its submission cap is the config's alone, as there is no loop to size it."""
    return GraderProcess.for_run(
        paths, config, base_model=base_model, isolation=isolation, max_submissions=config.max_submissions
    )


def _finalize(
    config: RunConfig,
    paths: RunPaths,
    spec: ExternalAgentSpec,
    grader: GraderProcess,
    tracker: Tracker,
    reporter: Reporter,
    result: SandboxResult | None,
    status: str,
    reason: str,
    started: float,
    isolation: str,
    failure: AgentFailure | None = None,
    gateway: ModelGateway | None = None,
    final_model: str | None = None,
) -> dict[str, Any]:
    """Everything reported comes from the grader's finalize, as for built-in runs (`agent.results.finish`); the model
    calls' totals from the gateway's budget ledger (`result_row` reads it)."""
    final = read_final(reporter, lambda: grader.finalize() if _alive(grader) else {})
    success = bool(result is not None and result.ok)
    row = result_row(
        config,
        paths,
        success=success,
        figures=final_figures(final),
        external=spec.name,
        duration_s=round(time.monotonic() - started, 1),
        isolation=isolation,
        error=failure.error if failure is not None else reason,
        llm_limit=(gateway.stop_reason or "") if gateway is not None else "",
    )
    scores = [float(s["score"]) for s in final.get("score_trajectory", []) if s.get("score") is not None]
    extra = {
        "grader": final,
        "agent_exit_code": None if result is None else result.exit_code,
        "agent_error": None if failure is None else failure.error,
        "agent_log_tail": [] if failure is None else failure.tail,
        "proposer": "external",
        "agent_llm": None if gateway is None else gateway_summary(gateway, paths),
        "contract": spec.contract,
        **({"final_model": final_model} if final_model is not None else {}),
    }
    summary, plot = write_ending(
        paths,
        row,
        status=status,
        reason=reason,
        scores=scores,
        public_baseline=final.get("baseline_score"),
        extra=extra,
    )
    with contextlib.suppress(Exception):  # tracking never turns a finished run into a failed one
        parent = tracker.start_parent(paths.run_id, config.benchmark, {})
        if failure is not None:
            tracker.set_tags(parent, {AGENT_ERROR_TAG: failure.reason[:5000]})
        if gateway is not None:
            tracker.log_metrics(
                parent,
                {
                    "agent_llm_calls": row.llm_calls,
                    "agent_llm_tokens": row.llm_tokens,
                    "agent_llm_usd": row.llm_cost_usd,
                },
            )
            if gateway.stop_reason:
                tracker.set_tags(parent, {AGENT_LLM_LIMIT_TAG: gateway.stop_reason[:5000]})
        for step, score in enumerate(scores, start=1):
            tracker.log_metrics(parent, {"score": score, "best_score": max(scores[:step])}, step=step)
        close_tracking(tracker, parent, row, paths, plot, status=status, reason=reason)
        atomic_write_json(paths.run_dir / "mlflow.json", {"mlflow_parent": parent})
    reporter.info(f"{spec.name}: {summary['headline']}; agent exit code {summary['agent_exit_code']}")
    return summary


def report_failure(
    reporter: Reporter, spec: ExternalAgentSpec, failure: AgentFailure, log_path: Path
) -> None:
    """The failure on the console: its one line, then the log's last lines (the traceback a person wants)."""
    reporter.error(f"{escape(spec.name)}: {escape(failure.reason)}")
    reporter.info(f"last lines of {log_path}:")
    for line in failure.tail:
        reporter.info(f"  | {escape(line)}", style="dim")


def _alive(grader: GraderProcess) -> bool:
    return grader.proc is not None and grader.proc.poll() is None
