"""The run service: start, watch, cancel and resume research runs over HTTP, and decide on proposals.

`create_app(settings)` builds the FastAPI app; `rlloop serve` runs it with uvicorn. Runs execute in worker processes
(see `agent.service.workers`), never inside a request. The OpenAPI schema is at /openapi.json, the docs at /docs.
"""

from __future__ import annotations

import logging
import re
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Annotated, Any

from fastapi import Depends, FastAPI, HTTPException, Request, Response, status
from fastapi import Path as PathParam
from fastapi.exception_handlers import request_validation_exception_handler
from fastapi.exceptions import RequestValidationError
from fastapi.responses import HTMLResponse, JSONResponse
from pydantic import ValidationError

from agent.loop import list_pending, write_decision
from agent.run import RUN_ID_PATTERN, RUN_ID_RULE, new_run_id
from agent.service.auth import (
    ADD_HINT,
    ServiceUser,
    UserDirectory,
    UsersFileError,
    admin_token_file_for,
    admin_token_user,
    ensure_admin_token,
    env_users,
    read_admin_token,
    read_users_file,
    users_file_for,
)
from agent.service.guard import Caller, authorize, wants_page
from agent.service.lineage import edit_problems
from agent.service.page_schemas import RunPage, TrialDetail
from agent.service.recipes import RecipeView, ServiceRecipes
from agent.service.records import load_record
from agent.service.runpage import RunRecords, etag_of, pending_of
from agent.service.schemas import (
    DecisionRecorded,
    DecisionRequest,
    Identity,
    PendingApproval,
    RunCreated,
    RunDetail,
    RunRequest,
    RunSummary,
    validate_run_request,
)
from agent.service.settings import ServiceSettings
from agent.service.views import MlflowLinks, pending_view, run_detail, run_links, run_summary
from agent.service.workers import RunConflictError, RunNotFoundError, WorkerPool
from grader.benchmarks import get_benchmark

PAGE = Path(__file__).with_name("page.html")
RUN_PAGE = Path(__file__).with_name("run.html")
ASSETS = {"/ui.js": "application/javascript", "/ui.css": "text/css"}
RunId = Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="The run's id (`GET /runs`).")]
TrialId = Annotated[str, PathParam(pattern=RUN_ID_PATTERN, description="The trial's id, e.g. t01.")]
logger = logging.getLogger("rlloop.service")
OPEN_WARNING = "this service is open: anyone who can reach it can start runs and approve"


def admin_token(settings: ServiceSettings) -> tuple[str | None, bool]:
    """(the admin token, whether this start made it). None with `no_auth` (refused when users exist: they would be
    ignored), and None with users but no token file; without users, the token file is made on the first start."""
    users_path = users_file_for(settings.home, settings.users_file)
    configured = [*read_users_file(users_path), *env_users()]
    token_path = admin_token_file_for(settings.home)
    if settings.no_auth:
        if configured:
            raise UsersFileError(
                f"--no-auth, but users are configured (in {users_path} or RLLOOP_SERVICE_TOKENS) and would be "
                "ignored: drop --no-auth, or remove the users"
            )
        return None, False
    if configured:
        return read_admin_token(token_path), False  # accepted too when an earlier start made it
    return ensure_admin_token(token_path)


def _origin(loc: tuple[int | str, ...], values: dict[str, Any]) -> tuple[int | str, ...]:
    """Where a config error came from: the body's field, or the service's environment for a field the caller left
    out."""
    if loc and loc[0] not in values:
        return ("env", f"RLLOOP_{str(loc[0]).upper()}", *loc[1:])
    return ("body", *loc)


def create_app(settings: ServiceSettings) -> FastAPI:
    """Build the service for one RLLOOP_HOME. The worker supervisor starts and stops with the app."""
    settings = settings.model_copy(update={"home": settings.home.resolve()})
    token, created = admin_token(settings)  # first: a users or token file that cannot be used stops the start
    pool = WorkerPool(settings)
    mlflow_links = MlflowLinks(settings.mlflow_ui_url, settings.home / "mlartifacts")
    recipes = ServiceRecipes()  # described in a child process, only for a run without its own recipes.json
    runs_dir = settings.home / "runs"
    token_file = admin_token_file_for(settings.home) if token is not None else None
    extra: list[ServiceUser] = [admin_token_user(token)] if token is not None else []
    directory = UserDirectory(
        users_file_for(settings.home, settings.users_file),
        settings.require_auth or not settings.no_auth,
        extra,
    )

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        if settings.no_auth:
            logger.warning(
                "\n%s\nWARNING: %s (started with --no-auth; it answers loopback only). Without --no-auth every "
                "request needs a token: the admin token the service makes, or a user's (`%s`)\n%s",
                "!" * 78,
                OPEN_WARNING.upper(),
                ADD_HINT,
                "!" * 78,
            )
        elif token_file is not None:
            logger.warning(
                "the admin token is %s %s (mode 0600); requests need it, or a user's token",
                "made and kept in" if created else "read from",
                token_file,
            )
        pool.start()
        try:
            yield
        finally:
            pool.stop()

    app = FastAPI(
        title="rlloop run service",
        version="0.1.0",
        summary="Start, watch, cancel and resume research runs; approve, edit or reject their proposals.",
        lifespan=lifespan,
        dependencies=[Depends(authorize)],  # every route; what each needs: agent.service.guard.required_role
    )
    app.state.settings = settings
    app.state.pool = pool
    app.state.users = directory
    app.state.admin_token = token
    app.state.admin_token_file = token_file
    app.state.recipes = recipes

    @app.exception_handler(RequestValidationError)
    async def body_not_json(request: Request, exc: RequestValidationError) -> Response:
        """A body that is not JSON at all is a bad request (400), said plainly; a JSON body with wrong fields stays
        FastAPI's 422, naming each field."""
        broken = next((e for e in exc.errors() if e.get("type") == "json_invalid"), None)
        if broken is None:
            return await request_validation_exception_handler(request, exc)
        where = broken.get("loc") or ()
        at = f" at character {where[-1]}" if where and isinstance(where[-1], int) else ""
        return JSONResponse(
            {
                "detail": f"the request body is not valid JSON ({broken.get('ctx', {}).get('error', 'malformed')}"
                f"{at}): send a JSON object with Content-Type: application/json, as /docs shows"
            },
            status_code=status.HTTP_400_BAD_REQUEST,
        )

    def pending_by_run() -> dict[str, list[str]]:
        grouped: dict[str, list[str]] = {}
        for run_id, trial in list_pending(runs_dir):
            grouped.setdefault(run_id, []).append(trial.trial_id)
        return grouped

    def summary_of(run_id: str, pending: dict[str, list[str]] | None = None) -> RunSummary:
        run_dir = runs_dir / run_id
        pending = pending_by_run() if pending is None else pending
        found = (
            run_summary(run_dir, pool.record(run_id), pending.get(run_id, [])) if run_dir.is_dir() else None
        )
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no run {run_id!r}; GET /runs lists them")
        return found

    @app.get("/", response_class=HTMLResponse, include_in_schema=False)
    def page() -> HTMLResponse:
        """The approvals page: runs and pending proposals, with Approve / Edit / Reject buttons."""
        return HTMLResponse(PAGE.read_text())

    def asset(name: str, media_type: str) -> None:
        path = Path(__file__).with_name(name.lstrip("/"))

        @app.get(name, include_in_schema=False)
        def serve_asset() -> Response:
            return Response(path.read_text(), media_type=media_type, headers={"Cache-Control": "no-cache"})

    for name, media_type in ASSETS.items():
        asset(name, media_type)

    def page_or_304(request: Request, body: Any) -> Response:
        """JSON with a weak ETag; 304 when the caller already has it (the page polls with If-None-Match)."""
        data = body.model_dump(mode="json")
        tag = etag_of(data)
        headers = {"ETag": tag, "Cache-Control": "no-cache"}
        if request.headers.get("if-none-match") == tag:
            return Response(status_code=status.HTTP_304_NOT_MODIFIED, headers=headers)
        return JSONResponse(data, headers=headers)

    @app.get("/health")
    def health(caller: Caller) -> dict[str, Any]:
        """Liveness, how many workers run now, and how callers sign in: `auth` is "token" or "open" (--no-auth);
        `admin_token_file` says where the admin token is kept (null when there is none): relative to the service's
        RLLOOP_HOME for anyone, and `home` with the absolute paths only for a signed-in admin (or an open service's
        caller on this machine)."""
        admin = caller.role == "admin" and (caller.authenticated or not directory.required)
        answer: dict[str, Any] = {
            "status": "ok",
            "running": pool.active_count(),
            "auth": "token" if directory.required else "open",
            "admin_token_file": f"RLLOOP_HOME/{token_file.name}" if token_file is not None else None,
        }
        if admin:
            answer["home"] = str(settings.home)
            answer["admin_token_file"] = str(token_file) if token_file is not None else None
        return answer

    @app.get("/auth/me", response_model=Identity)
    def whoami(caller: Caller) -> Identity:
        """Who the bearer token belongs to, and whether this service demands tokens at all."""
        return Identity(user=caller.name, role=caller.role, auth_required=directory.required)

    @app.post("/runs", status_code=status.HTTP_202_ACCEPTED, response_model=RunCreated)
    def create_run(body: RunRequest) -> RunCreated:
        """Start a research run in its own worker process.

        The body holds `rlloop run`'s fields (RunConfig); omitted ones take the service's RLLOOP_* environment, then
        the defaults. The run starts at once when fewer than `max_concurrent_runs` run, else it waits with status
        `queued`. Poll `links.self` for progress.
        """
        values = body.model_dump(exclude_unset=True, mode="json")
        try:
            config = validate_run_request(values, settings.home)
        except ValidationError as exc:
            raise RequestValidationError(
                [
                    {**e, "loc": _origin(e["loc"], values)}
                    for e in exc.errors(include_url=False, include_context=False)
                ]
            ) from None
        try:  # the name is checked with the config; here, that its plugin makes a benchmark
            get_benchmark(config.benchmark)
        except TypeError as exc:
            message = exc.args[0] if exc.args else str(exc)
            raise RequestValidationError(
                [{"loc": ("body", "benchmark"), "msg": str(message), "type": "value_error"}]
            ) from None
        run_id = config.run_id or new_run_id(config.benchmark)
        if not re.match(RUN_ID_PATTERN, run_id):
            raise RequestValidationError(
                [{"loc": ("body", "run_id"), "msg": f"run_id must be {RUN_ID_RULE}", "type": "value_error"}]
            )
        config.run_id = run_id
        try:
            record = pool.submit(config)
        except RunConflictError as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
        summary = summary_of(run_id)
        return RunCreated(run_id=run_id, status=summary.status, links=run_links(run_id, record))

    @app.get("/runs", response_model=list[RunSummary])
    def list_runs() -> list[RunSummary]:
        """Every run under the service's home (its own and the CLI's): status, baseline, best, submissions."""
        if not runs_dir.is_dir():
            return []
        pending = pending_by_run()
        found = [run_summary(d, load_record(d), pending.get(d.name, [])) for d in sorted(runs_dir.iterdir())]
        return [s for s in found if s is not None]

    @app.get("/runs/{run_id}", response_model=RunDetail)
    def get_run(run_id: RunId, request: Request) -> Any:
        """One run with its trials (scores, errors, approvals) from the checkpoint, and its MLflow page. A browser
        opening this URL gets the run page instead (no data: it fetches `/runs/{run_id}/view` with its token)."""
        if wants_page(request):
            return HTMLResponse(RUN_PAGE.read_text())
        summary = summary_of(run_id)
        return run_detail(summary, runs_dir / run_id, pool.record(run_id), mlflow_links)

    @app.get("/runs/{run_id}/view", response_model=RunPage)
    def run_page(run_id: RunId, request: Request) -> Response:
        """What the run page draws: the trial tree, the score over submissions, the budget, the decisions so far.
        Carries an ETag: send If-None-Match to get 304 while nothing changed."""
        summary = summary_of(run_id)
        detail = run_detail(summary, runs_dir / run_id, pool.record(run_id), mlflow_links)
        return page_or_304(request, RunRecords(runs_dir / run_id, recipes).page(summary, detail.mlflow_url))

    @app.get("/runs/{run_id}/trials/{trial_id}", response_model=TrialDetail)
    def trial_detail(run_id: RunId, trial_id: TrialId, request: Request) -> Any:
        """One trial: proposal (each hyperparameter with what it replaced), code and its diff, log tail, training
        curves, wrong answers on valid by kind, the grader's answer, the proposer's tool calls. A browser gets the
        page."""
        if wants_page(request):
            return HTMLResponse(RUN_PAGE.read_text())
        summary_of(run_id)
        found = RunRecords(runs_dir / run_id, recipes).trial_detail(trial_id)
        if found is None:
            raise HTTPException(status.HTTP_404_NOT_FOUND, f"no trial {trial_id!r} in run {run_id!r}")
        return page_or_304(request, found)

    def act_on(action: Callable[[str], object], run_id: str) -> RunSummary:
        """Cancel or resume through the pool: no such run is 404, a run in the wrong state 409."""
        try:
            action(run_id)
        except RunNotFoundError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        except RunConflictError as exc:
            raise HTTPException(status.HTTP_409_CONFLICT, str(exc)) from None
        return summary_of(run_id)

    @app.post("/runs/{run_id}/cancel", status_code=status.HTTP_202_ACCEPTED, response_model=RunSummary)
    def cancel_run(run_id: RunId) -> RunSummary:
        """Stop a run: a queued one leaves the queue; a running one gets SIGTERM, writes its results row and stays
        resumable (`POST /runs/{run_id}/resume`)."""
        return act_on(pool.cancel, run_id)

    @app.post("/runs/{run_id}/resume", status_code=status.HTTP_202_ACCEPTED, response_model=RunSummary)
    def resume_run(run_id: RunId) -> RunSummary:
        """Continue a stopped run from its last checkpoint (`rlloop resume`): finished trials are kept."""
        return act_on(pool.resume, run_id)

    @app.get("/approvals", response_model=list[PendingApproval])
    def list_approvals() -> list[PendingApproval]:
        """Proposals waiting for a decision, across runs."""
        out: list[PendingApproval] = []
        records: dict[str, RunRecords] = {}  # each run's records read once per request
        for run_id, trial in list_pending(runs_dir):
            record = pool.record(run_id)
            active = record is not None and record.state == "running"
            if record is None:
                summary = run_summary(runs_dir / run_id, None, [])
                active = summary is not None and summary.status == "running"
            view = pending_view(run_id, trial, active)
            try:
                if run_id not in records:
                    records[run_id] = RunRecords(runs_dir / run_id, recipes)
                view.context = records[run_id].approval_context(trial)
            except Exception:  # a half-written run: the card still shows the proposal and its buttons
                logger.exception("could not assemble the context of %s %s", run_id, trial.trial_id)
            out.append(view)
        return out

    @app.post("/approvals/{run_id}/{trial_id}", response_model=DecisionRecorded)
    def decide(run_id: RunId, trial_id: TrialId, body: DecisionRequest, caller: Caller) -> DecisionRecorded:
        """Approve, edit (`set` hyperparameters, `train_py`), reject (with a `reason`) or terminate a waiting
        proposal. The waiting run picks the decision up within a second; 404 when nothing waits. With users
        configured the reviewer recorded is the token's user (a different `by` is refused)."""
        decision = body.to_decision()
        if caller.authenticated and caller.name is not None:
            if body.by and body.by.strip() and body.by.strip() != caller.name:
                raise HTTPException(
                    status.HTTP_403_FORBIDDEN,
                    f"you are signed in as {caller.name!r}: a decision cannot be recorded as {body.by.strip()!r}; "
                    "omit `by` (the token's user is recorded)",
                )
            decision = decision.model_copy(update={"by": caller.name})
        if decision.action == "edit" and decision.set:
            waiting = next((t for t in pending_of(runs_dir / run_id) if t.trial_id == trial_id), None)
            if waiting is not None and waiting.proposal.train_py is None:
                recipe = decision.recipe or waiting.proposal.recipe
                problems = edit_problems(
                    recipe,
                    waiting.proposal.hyperparameters,
                    decision.set,
                    RecipeView(runs_dir / run_id, recipes),
                )
                if problems:
                    raise RequestValidationError(
                        [{"loc": ("body", "set"), "msg": p, "type": "value_error"} for p in problems]
                    )
        try:
            path = write_decision(runs_dir / run_id, trial_id, decision)
        except LookupError as exc:
            raise HTTPException(status.HTTP_404_NOT_FOUND, str(exc)) from None
        return DecisionRecorded(
            run_id=run_id, trial_id=trial_id, decision=decision.model_dump(mode="json"), path=str(path)
        )

    return app
