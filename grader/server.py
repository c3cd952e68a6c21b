"""FastAPI app of the grading server (AutoRL-Bench-compatible field names).

- `POST /submit {"model_path"}` (Bearer token): evaluate a checkpoint, one at a time, and answer with its score.
- `GET /health`: `{"status": "ok", "ready": true, ...}` once the baseline is scored.
- `GET /time`, `GET /scores`, `GET /best`.
- `POST /finalize` (Bearer token): end the run, reveal private scores, return the run's metrics.

There is no way to set the baseline through the API. Every refusal is a 4xx whose `detail` names the problem
without echoing anything the grader holds.
"""

from __future__ import annotations

import asyncio
import logging
import secrets
import threading
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

from fastapi import Depends, FastAPI, Request
from fastapi.concurrency import run_in_threadpool
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException

from grader.contract import FinalizeAnswer, GraderConfig, SubmitAnswer, SubmitRequest
from grader.rejected import SubmissionRejected
from grader.service import GraderService

log = logging.getLogger("grader")


def _reject(status_code: int, detail: str, **extra: Any) -> JSONResponse:
    headers = {"WWW-Authenticate": "Bearer"} if status_code == 401 else None
    return JSONResponse(status_code=status_code, content={"detail": detail, **extra}, headers=headers)


def create_app(config: GraderConfig, service: GraderService | None = None) -> FastAPI:
    """Build the app; the baseline is scored in a background thread started by the lifespan."""
    svc = service or GraderService(config)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        threading.Thread(target=svc.start, name="grader-startup", daemon=True).start()
        yield
        svc.stop()

    app = FastAPI(title="rlloop grader", version="1", lifespan=lifespan)
    app.state.service = svc

    @app.exception_handler(SubmissionRejected)
    async def _rejected(request: Request, exc: SubmissionRejected) -> JSONResponse:
        extra = {"submission_id": exc.submission_id} if exc.submission_id is not None else {}
        return _reject(exc.status_code, exc.reason, **extra)

    @app.exception_handler(RequestValidationError)
    async def _bad_body(request: Request, exc: RequestValidationError) -> JSONResponse:
        return _reject(422, 'request body must be JSON like {"model_path": "/absolute/path/to/checkpoint"}')

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        return _reject(exc.status_code, str(exc.detail))

    @app.exception_handler(Exception)
    async def _internal(request: Request, exc: Exception) -> JSONResponse:
        log.exception("unhandled error on %s", request.url.path)
        return _reject(500, "internal grader error; see grader.log in the grader's private folder")

    def require_token(request: Request) -> None:
        header = request.headers.get("authorization", "")
        scheme, _, token = header.partition(" ")
        if scheme.lower() != "bearer" or not secrets.compare_digest(
            token.strip().encode(), config.token.encode()
        ):
            raise SubmissionRejected(401, "missing or wrong token; send 'Authorization: Bearer <token>'")

    @app.get("/health")
    def health() -> dict[str, Any]:
        body: dict[str, Any] = {
            "status": "error" if svc.startup_error else "ok",
            "ready": svc.ready,
            "run_id": config.run_id,
            "benchmark": config.benchmark,
        }
        if svc.ready:
            body["baseline_score"] = svc.reported_baseline()
            body["n"] = svc.baseline.n if svc.baseline else None
        if svc.startup_error:
            body["error"] = svc.startup_error
        return body

    @app.get("/time")
    def elapsed() -> dict[str, Any]:
        return {
            "elapsed_seconds": round(svc.elapsed(), 3),
            "started_at": svc.started_at,
            "finalized": svc.finalized(),
        }

    @app.get("/scores")
    def scores() -> dict[str, Any]:
        return svc.scores()

    @app.get("/best")
    def best() -> dict[str, Any]:
        top = svc.best()
        baseline = svc.reported_baseline() if svc.ready else None
        if top is None:
            return {"submission_id": None, "score": None, "baseline_score": baseline}
        view = svc.public_view(top, reveal=svc.finalized())
        return {**view, "baseline_score": baseline}

    @app.post("/submit", dependencies=[Depends(require_token)])
    async def submit(body: SubmitRequest) -> SubmitAnswer:
        svc.check_open()
        received = await run_in_threadpool(svc.validate, body.model_path)
        sub, pending = await run_in_threadpool(svc.accept, received)
        if pending is not None:
            await asyncio.wrap_future(pending)
        return await run_in_threadpool(svc.submit_response, sub)

    @app.post("/finalize", dependencies=[Depends(require_token)])
    async def finalize() -> FinalizeAnswer:
        return await run_in_threadpool(svc.finalize)

    return app
