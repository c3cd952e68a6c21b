"""Commands that start servers leave nothing running once they are stopped: each runs as a real process, answers,
gets SIGTERM (or SIGINT, or its parent is SIGKILLed), and within 5 s no process of its tree is alive."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from agent.children import run_child
from agent.grading import free_port
from tests.support.processes import alive, cmdline, descendants, still_alive

ROOT = Path(__file__).resolve().parents[2]


def _start(home: Path, *args: str) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RLLOOP_HOME": str(home)}
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,  # like a terminal's job: the test's own signals do not reach it
    )


def _wait_answering(proc: subprocess.Popen[bytes], url: str, timeout_s: float = 180.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited with code {proc.returncode} before answering"
        try:
            httpx.get(url, timeout=2.0)
            return
        except httpx.HTTPError:
            time.sleep(0.5)
    raise AssertionError(f"{url} did not answer within {timeout_s:.0f}s")


@pytest.fixture()
def started() -> Iterator[list[subprocess.Popen[bytes]]]:
    """Processes a test started; whatever a failing test leaves is killed, group and all."""
    procs: list[subprocess.Popen[bytes]] = []
    yield procs
    for proc in procs:
        tree = descendants(proc.pid)
        for pid in [proc.pid, *tree]:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)


def _stop_and_check(proc: subprocess.Popen[bytes], sig: int = signal.SIGTERM) -> None:
    tree = descendants(proc.pid)
    proc.send_signal(sig)
    try:
        proc.wait(timeout=15)
    except subprocess.TimeoutExpired:
        pytest.fail(f"the command did not exit within 15 s of {signal.Signals(sig).name}")
    left = still_alive(tree, within_s=5.0)
    assert not left, f"left running after {signal.Signals(sig).name}: {left}"


def test_ui_sigterm_stops_mlflow_and_its_workers(
    tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    proc = _start(tmp_path, "ui", "--home", str(tmp_path), "--port", str(port))
    started.append(proc)
    _wait_answering(proc, f"http://127.0.0.1:{port}/")
    time.sleep(2.0)  # its job consumers start after the server answers
    assert len(descendants(proc.pid)) >= 2, "expected mlflow's server and its workers below `rlloop ui`"
    _stop_and_check(proc, signal.SIGTERM)


@pytest.mark.slow  # builds and loads the tiny model; the grader scores its baseline
def test_grade_serve_sigterm_stops_the_grader(
    tiny_model_home: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    proc = _start(
        tiny_model_home,
        "grade",
        "serve",
        "--home",
        str(tiny_model_home),
        "--port",
        str(port),
        "--eval-limit",
        "8",
        "--submissions-root",
        str(tiny_model_home / "outputs"),
    )
    started.append(proc)
    _wait_answering(proc, f"http://127.0.0.1:{port}/health")
    assert any("grader" in cmdline(p) for p in descendants(proc.pid))
    _stop_and_check(proc, signal.SIGTERM)


def test_serve_sigterm_leaves_nothing(tmp_path: Path, started: list[subprocess.Popen[bytes]]) -> None:
    port = free_port()
    proc = _start(tmp_path, "serve", "--home", str(tmp_path), "--port", str(port))
    started.append(proc)
    _wait_answering(proc, f"http://127.0.0.1:{port}/")
    _stop_and_check(proc, signal.SIGTERM)


# A parent that runs `sleep` (and a grandchild of it, in the same group) through run_child, printing the pids.
PARENT = """
import sys
from agent.children import run_child
sys.exit(run_child(["sh", "-c", "sleep 300 & echo $$ $!; wait"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT, signal.SIGKILL])
def test_run_child_stops_the_group_with_its_parent(sig: int, started: list[subprocess.Popen[bytes]]) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", PARENT], cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True
    )
    started.append(proc)
    assert proc.stdout is not None
    pids = [int(p) for p in proc.stdout.readline().split()]
    assert len(pids) == 2 and all(alive(p) for p in pids)
    proc.send_signal(sig)
    proc.wait(timeout=15)
    # after SIGKILL too: the shell gets its death signal, the group's keeper stops its `sleep`
    assert not still_alive(pids, within_s=5.0)


def test_run_child_passes_the_exit_code_through() -> None:
    assert run_child(["sh", "-c", "exit 3"]) == 3
    assert run_child(["sh", "-c", "kill -TERM $$"]) == 128 + signal.SIGTERM
