"""A real uvicorn server for the run service on 127.0.0.1, in a thread of the test process; the MLflow UI as
`rlloop ui` serves it, in a process of its own."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any

import httpx
import uvicorn

from agent.service import ServiceSettings, create_app

ACTIVE = ("queued", "running", "waiting for approval")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def add_users(home: Path, roles: dict[str, str]) -> dict[str, str]:
    """Create users in HOME/service_users.json (as `rlloop serve users add` does); returns name -> token."""
    from agent.service.auth import USERS_FILE_NAME, add_user

    return {name: add_user(home / USERS_FILE_NAME, name, role) for name, role in roles.items()}


@contextmanager
def running_service(
    home: Path, token: str | None = None, anonymous: bool = False, **settings: Any
) -> Iterator[httpx.Client]:
    """Start the service on a free port; on exit, stop it and SIGKILL any worker it left (no orphans).

    `token` goes with every request of the client as `Authorization: Bearer <token>` (for services with users).
    Without one, a service that signs in with its admin token (no users, no `no_auth`) gets that token, as a person who
    opened the printed sign-in link would; `anonymous` sends none."""
    config = ServiceSettings(home=home, poll_interval_s=0.2, **settings)
    app = create_app(config)
    if token is None and not anonymous:
        token = app.state.admin_token
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30
    while not server.started:
        assert thread.is_alive() and time.monotonic() < deadline, "the service did not start"
        time.sleep(0.05)
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    client = httpx.Client(base_url=f"http://127.0.0.1:{port}", timeout=30, headers=headers)
    try:
        yield client
    finally:
        client.close()
        server.should_exit = True
        thread.join(timeout=30)


def kill_workers(home: Path) -> None:
    """SIGKILL the process group of every worker recorded under `home` that still runs."""
    from agent.service.records import load_record
    from tasks.procfs import same_process_alive

    for run_dir in (home / "runs").glob("*"):
        record = load_record(run_dir)
        if record and record.pid and same_process_alive(record.pid, record.process_start):
            with suppress(ProcessLookupError):
                os.killpg(record.pid, signal.SIGKILL)


def wait_for(
    client: httpx.Client, run_id: str, done: Callable[[dict[str, Any]], bool], timeout: float = 120
) -> dict[str, Any]:
    """Poll GET /runs/{run_id} until `done(body)`; fail with the last body otherwise."""
    deadline = time.monotonic() + timeout
    body: dict[str, Any] = {}
    while time.monotonic() < deadline:
        response = client.get(f"/runs/{run_id}")
        if response.status_code == 200:
            body = response.json()
            if done(body):
                return body
        time.sleep(0.3)
    raise AssertionError(f"run {run_id} never reached the expected state; last: {body}")


@contextmanager
def running_mlflow_ui(home: Path, port: int) -> Iterator[str]:
    """`rlloop ui`'s MLflow server on `home`'s store at 127.0.0.1:`port` until the block ends; yields its address."""
    from agent.tracking.ui import ui_command

    cmd, env = ui_command(home, host="127.0.0.1", port=port)
    server = subprocess.Popen(
        cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
    )
    address = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            assert server.poll() is None and time.monotonic() < deadline, "the MLflow UI did not start"
            try:
                if httpx.get(f"{address}/health", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.5)
        yield address
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        try:
            server.wait(timeout=20)
        except subprocess.TimeoutExpired:
            os.killpg(server.pid, signal.SIGKILL)
            server.wait()
