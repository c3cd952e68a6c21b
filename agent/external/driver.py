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

Token: the rlloop grader wants `Authorization: Bearer <token>` on /submit, which an AutoRL-Bench agent never
sends. The token is never handed to the agent; instead a `TokenRelay` on the host's 127.0.0.1 forwards the
agent-facing endpoints (/submit, /health, /time, /scores, /best) to the grader with the header added, and refuses
everything else (/finalize above all). The sandbox's `network="grader"` makes that relay the only reachable host.
The relay also speaks AutoRL-Bench's dialect where rlloop's grader differs (`agent.external.autorl.AutoRLAdapter`).

Model: with `agent_llm_base_url` set, the same relay address also serves `/v1/...` through the model gateway
(`agent.external.gateway`): the agent gets OPENAI_*/ANTHROPIC_*/LITELLM_* variables pointing at it with a placeholder
key, and its calls are forwarded with the real key, metered against the run's caps and recorded. One address still
serves everything, so the sandbox's network stays as it is.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Literal

import httpx
import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator
from rich.markup import escape

from agent.external import named, posttrainbench
from agent.external.agent_failure import AgentFailure, diagnose
from agent.external.autorl import AutoRLAdapter, init_run_meta, update_run_meta
from agent.external.gateway import GatewayConfig, ModelGateway
from agent.external.gateway import agent_env as llm_env
from agent.external.llm_traces import CallTraces
from agent.llm import Budget, BudgetLimits, PriceTable
from agent.loop import TRAIN_ENV
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
    open_sandbox,
    prepare_workspace,
    record_run,
)
from agent.tracking import Tracker
from sandbox import untrusted
from sandbox.base import Mount, Sandbox, SandboxRequest, SandboxResult, maps_paths
from sandbox.namespaces import hand_to_sandbox_user
from sandbox.registry import isolation_of
from tasks.atomic import atomic_write_json

AGENT_ERROR_TAG = "rlloop.agent_error"  # MLflow tag on the run's parent: "agent failed: <error line>"
AGENT_LLM_LIMIT_TAG = "rlloop.agent_llm_limit"  # MLflow tag: the cap that refused the agent's model calls
AGENT_TRIAL = "agent"  # trials/<id>: the host's record of the agent (its log)
INSIDE = Path("/workspace")  # the agent's folder, as it sees it (its working directory)
META_INSIDE = Path("/run/rlloop-meta")  # the host's run_meta.json folder, read-only
FORWARDED = {("POST", "/submit"), ("GET", "/health"), ("GET", "/time"), ("GET", "/scores"), ("GET", "/best")}
# Re-export RLLOOP_GRADER_URL (what every sandbox backend sets to the address the command can reach) under the
# AutoRL-Bench name, then hand over to the agent's start script exactly as run_agent.py does: `bash <start>`.
LAUNCHER = 'export GRADING_SERVER_URL="${RLLOOP_GRADER_URL:-$GRADING_SERVER_URL}"; exec bash "$0"'
INSIDE_URL = "$GRADING_SERVER_URL"  # how the launcher names the relay's address as the agent sees it


def launcher(llm_urls: dict[str, str] | None = None) -> str:
    """LAUNCHER, and with a model gateway its URL variables re-exported from the address the sandbox set."""
    if not llm_urls:
        return LAUNCHER
    first, _, rest = LAUNCHER.partition("; ")
    exports = " ".join(f'{name}="{value}"' for name, value in llm_urls.items())
    return f"{first}; export {exports}; {rest}"


class ExternalAgentError(ValueError):
    """The agent folder cannot be used (no config.yaml, bad fields, missing start script)."""


class AgentImageMissingError(RuntimeError):
    """Docker is how this run isolates the agent, but the agent image has not been built."""


class ExternalAgentSpec(BaseModel):
    """An agent folder's config.yaml, as AutoRL-Bench defines it."""

    name: str = Field(min_length=1)
    start: str = "start.sh"
    contract: Literal["autorl-bench", "posttrainbench"] = "autorl-bench"  # whose agent layout it follows
    description: str = ""
    env_vars: dict[str, str] = Field(default_factory=dict)
    folder: Path = Path()

    @field_validator("env_vars", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        return value

    @property
    def start_script(self) -> Path:
        return self.folder / self.start


def is_agent_folder(value: str | Path) -> bool:
    """True for a folder holding config.yaml (AutoRL-Bench) or solve.sh (PostTrainBench), or the name of a coding
    agent rlloop ships (`claude-code`, `codex`, `opencode`): how `--agents` tells an external agent from
    `builtin`/`llm`."""
    path = named.resolve(value)
    return path.is_dir() and ((path / "config.yaml").is_file() or posttrainbench.is_solve_folder(path))


def load_agent(folder: str | Path) -> ExternalAgentSpec:
    """Read and check `folder/config.yaml` (or a named agent's folder); one line naming what is wrong otherwise."""
    root = named.resolve(folder).resolve()
    config_path = root / "config.yaml"
    if posttrainbench.is_solve_folder(root):
        return ExternalAgentSpec(
            name=root.name, start=posttrainbench.START, contract=posttrainbench.CONTRACT, folder=root
        )
    if not config_path.is_file():
        raise ExternalAgentError(
            f"{root} is not an agent folder: it has no config.yaml (name, start, env_vars; AutoRL-Bench's) "
            "and no solve.sh (PostTrainBench's)"
        )
    try:
        data = yaml.safe_load(config_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ExternalAgentError(f"{config_path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ExternalAgentError(f"{config_path} must be a mapping with at least `name` and `start`")
    try:
        spec = ExternalAgentSpec.model_validate({**data, "folder": root})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ExternalAgentError(f"{config_path}: {problems}") from None
    start = spec.start_script.resolve()
    if not start.is_file() or root not in start.parents:
        raise ExternalAgentError(f"{config_path}: start script {spec.start!r} is not a file inside {root}")
    return spec


class _Server(ThreadingHTTPServer):
    """The relay's listener: a thread per connection, and a backlog for the calls a coding agent fires at once
    (socketserver's default of 5 reset connections when 20 arrived together)."""

    daemon_threads = True
    request_queue_size = 128


class TokenRelay:
    """An HTTP relay on 127.0.0.1 that adds the grader's bearer token to the endpoints an agent may use."""

    def __init__(
        self,
        upstream: str,
        token: str,
        timeout_s: float = 1800.0,
        adapter: AutoRLAdapter | None = None,
        gateway: ModelGateway | None = None,
    ) -> None:
        self.upstream = upstream.rstrip("/")
        self.gateway = gateway
        relay = self

        class Handler(BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"
            disable_nagle_algorithm = True  # headers and body go out as separate writes: no 40 ms ACK stalls

            def _forward(self, method: str) -> None:
                path = self.path.split("?", 1)[0]
                if gateway is not None and gateway.handles(path):
                    gateway.serve(self, method)  # the agent's model calls: /v1/...
                    return
                length = int(self.headers.get("Content-Length") or 0)
                body = self.rfile.read(length) if length else b""
                if (method, path) not in FORWARDED:
                    self._answer(403, {"detail": f"{method} {path} is not open to agents"})
                    return
                sent = adapter.request_body(method, path, body) if adapter else body
                try:
                    response = httpx.request(
                        method,
                        f"{relay.upstream}{self.path}",
                        content=sent,
                        headers={
                            "Content-Type": self.headers.get("Content-Type", "application/json"),
                            "Authorization": f"Bearer {token}",
                        },
                        timeout=timeout_s,
                    )
                except httpx.HTTPError as exc:
                    self._answer(502, {"detail": f"grading server unreachable: {exc}"})
                    return
                content = response.content
                if adapter is not None:
                    content = adapter.response_body(method, path, response.status_code, content, body)
                self._raw(response.status_code, content, response.headers.get("content-type", ""))

            def _answer(self, status: int, payload: dict[str, Any]) -> None:
                self._raw(
                    status, json.dumps({**payload, "error": payload["detail"]}).encode(), "application/json"
                )

            def _raw(self, status: int, content: bytes, content_type: str) -> None:
                self.send_response(status)
                self.send_header("Content-Type", content_type or "application/octet-stream")
                self.send_header("Content-Length", str(len(content)))
                self.end_headers()
                self.wfile.write(content)

            def do_GET(self) -> None:  # noqa: N802 - http.server's naming
                self._forward("GET")

            def do_POST(self) -> None:  # noqa: N802
                self._forward("POST")

            def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - quiet
                return

        self._server = _Server(("127.0.0.1", 0), Handler)
        host, port = self._server.server_address[:2]
        self.url = f"http://{host!s}:{port}"
        self._thread = threading.Thread(
            target=self._server.serve_forever, name="rlloop-token-relay", daemon=True
        )
        self._thread.start()

    def close(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)


def agent_request(
    spec: ExternalAgentSpec,
    *,
    paths: RunPaths,
    config: RunConfig,
    base_model: Path,
    grader_url: str,
    timeout_s: float,
    gateway: ModelGateway | None = None,
) -> SandboxRequest:
    """The sandbox request that runs the whole agent: AutoRL-Bench's variables, its own folder the one writable
    place (at /workspace), everything else it reads mounted read-only at fixed paths; with a `gateway`, the model
    variables (the placeholder key; the URLs as the launcher re-exports them from the address the sandbox set)."""
    models = INSIDE / "models" / model_name(config.base_model)
    prepare_agent_dir(paths, str(models.relative_to(INSIDE)))
    env = {
        **TRAIN_ENV,
        **spec.env_vars,
        "TASK": config.benchmark,
        "BASE_MODEL": config.base_model,
        "WORKSPACE": str(INSIDE),
        "MODEL_PATH": str(models),
        "DATA_PATH": str(INSIDE / "data"),
        "OUTPUT_DIR": str(INSIDE / "output"),
        "GRADING_SERVER_URL": grader_url,
    }
    if spec.contract == posttrainbench.CONTRACT:  # PostTrainBench's variables and timer.sh, beside the above
        env["PROMPT"] = posttrainbench.prompt(
            config.base_model, config.benchmark, str(models.relative_to(INSIDE)), timeout_s
        )
        env["AGENT_CONFIG"] = (
            gateway.config.models[0] if gateway is not None and gateway.config.models else ""
        )
        env["NUM_GPUS"] = str(config.trial_gpus)
        posttrainbench.write_timer(paths.agent_meta_dir, time.time() + timeout_s)
        posttrainbench.link_timer(paths.agent_dir, META_INSIDE)
    llm_urls: dict[str, str] = {}
    if gateway is not None:
        inside = llm_env(gateway.placeholder, INSIDE_URL, gateway.config.models)
        llm_urls = {k: v for k, v in inside.items() if INSIDE_URL in v}
        env.update(llm_env(gateway.placeholder, grader_url, gateway.config.models))  # the host-side address
    readonly = [
        Mount(source=paths.data_dir, target=INSIDE / "data"),
        *(
            Mount(source=paths.workspace / name, target=INSIDE / name)
            for name in ("description.md", "instructions.md")
            if (paths.workspace / name).is_file()
        ),
        Mount(source=base_model, target=models),
        Mount(source=paths.agent_meta_dir, target=META_INSIDE),
        Mount(source=spec.folder, target=Path("/agent")),
    ]
    return SandboxRequest(
        command=["bash", "-c", launcher(llm_urls), str(Path("/agent") / spec.start)],
        workspace=paths.agent_dir,
        workspace_target=INSIDE,
        log_path=untrusted.host_dir(paths.trial_dir(AGENT_TRIAL), anchor=paths.run_dir) / "log.txt",
        timeout_s=timeout_s,
        memory_mb=config.trial_memory_mb,
        cpus=config.trial_cpus,
        env=env,
        mounts=readonly,
        network="grader",
        grader_url=grader_url,
        labels={**paths.labels, "rlloop.trial": AGENT_TRIAL},
    )


def model_name(name: str) -> str:
    """`models/<name>` as AutoRL-Bench names it: the hub id, or a local folder's last part."""
    return Path(name).name if Path(name).is_absolute() else name


def prepare_agent_dir(paths: RunPaths, model_rel: str) -> None:
    """The agent's folder (made by the host, handed to the sandbox user) with AutoRL-Bench's `code/` and
    `output/`, and `run_meta.json` as a link to the host's read-only copy. Names the agent already took (a
    resumed run) are left as they are: nothing here follows, overwrites or walks what the agent made."""
    untrusted.host_dir(paths.agent_meta_dir, anchor=paths.run_dir)
    folder = untrusted.host_dir(paths.agent_dir, anchor=paths.run_dir)
    hand_to_sandbox_user(folder)
    # code/ and output/ for the agent; the folders the base model is mounted under (models/, models/<org>/), made
    # here so the agent can traverse them (a mount point's missing parents would be root's, 0700)
    made = ["code", "output", *(str(p) for p in reversed(Path(model_rel).parents) if str(p) != ".")]
    for name in made:
        with contextlib.suppress(FileExistsError):
            (folder / name).mkdir(mode=0o755)
            hand_to_sandbox_user(folder / name)
    with contextlib.suppress(FileExistsError):
        os.symlink(META_INSIDE / "run_meta.json", folder / "run_meta.json")


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
    from agent.run import resolve_base_model
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
    base_model = resolve_base_model(config.base_model, home)
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


def named_agent_problem(spec: ExternalAgentSpec, config: RunConfig) -> str | None:
    """Why a coding agent rlloop ships (claude-code, codex, opencode) cannot run with `config`, else None: it
    needs a model (the gateway's upstream and the model it runs)."""
    if not named.is_named_folder(spec.folder):
        return None
    models = [m for m in (config.agent_llm_models or "").split(",") if m.strip()]
    if config.agent_llm_base_url and models:
        return None
    command, api = named.NAMED_AGENTS[spec.folder.name]
    return (
        f"--agents {spec.name} runs `{command}`, which needs a model: give --agent-llm-base-url (an upstream "
        f"serving {api}), --agent-llm-models MODEL (the first is the one it runs) and --agent-llm-key-env VAR "
        "(the host variable holding the key)"
    )


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


def agent_sandbox(config: RunConfig, reporter: Reporter, coding_agents: bool = False) -> Sandbox:
    """Docker runs the agent in the agent image (AutoRL-Bench's packages), never in the lean trainer image: with
    `--sandbox docker`, or `auto` where Docker is usable, a missing agent image is an error saying how to build it.
    Other backends run the agent as they run trials."""
    from sandbox.images import AGENT_IMAGE
    from sandbox.registry import get_sandbox, resolve_auto

    if config.sandbox not in ("docker", "auto"):
        return open_sandbox(config, reporter, require_isolation=True)
    problem = missing_agent_image(config.sandbox, coding_agents=coding_agents)
    if problem is not None:
        raise AgentImageMissingError(problem)
    choice = resolve_auto(AGENT_IMAGE)  # docker usable with the agent image: docker, running that image
    if choice.name == "docker":
        return get_sandbox("docker", image=choice.image)
    return open_sandbox(config, reporter, require_isolation=True)


def missing_agent_image(sandbox: str, coding_agents: bool = False) -> str | None:
    """Why external agents cannot run with `sandbox` here (Docker chosen, agent image not built; with
    `coding_agents`, an image built without the pinned CLIs), else None."""
    from sandbox.images import AGENT_CLIS_LABEL, AGENT_IMAGE, agent_clis_pins
    from sandbox.registry import resolve_auto
    from sandbox.status import docker_status, image_labels

    if sandbox not in ("docker", "auto"):
        return None
    status = docker_status(AGENT_IMAGE)
    if not status.engine_reachable:
        return None
    if sandbox != "docker" and resolve_auto().name != "docker":  # auto would not pick docker
        return None
    if not status.image_present:
        return (
            f"external agents run in the image {AGENT_IMAGE} (the trainer image plus AutoRL-Bench's agent "
            "packages and the coding agents), which is not built: run `rlloop sandbox build --agent`"
        )
    if coding_agents and image_labels(AGENT_IMAGE).get(AGENT_CLIS_LABEL) != agent_clis_pins():
        return (
            f"the image {AGENT_IMAGE} was built without the coding agents at the versions this rlloop runs "
            f"({agent_clis_pins()}): run `rlloop sandbox build --agent` again"
        )
    return None


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
