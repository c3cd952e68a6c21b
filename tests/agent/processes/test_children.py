"""Commands that start servers leave nothing running once they are stopped: each runs as a real process, answers,
gets SIGTERM (or SIGINT, or its parent is SIGKILLed), and within 5 s no process of its tree is alive.

One test per command that starts children (`rlloop ui`, `rlloop grade serve`, `rlloop serve`, a run's grader), and
the shared `agent.processes.children` they all use. Everything listens on loopback only."""

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

from agent.processes.children import kill_tree, run_child, spawn_child, tree
from agent.processes.ports import free_port
from tests.grader.tiny import make_tiny_model
from tests.support.processes import alive, cmdline, descendants, still_alive

ROOT = Path(__file__).resolve().parents[3]


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


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_ui_sigterm_stops_mlflow_and_its_workers(
    sig: int, tmp_path: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    proc = _start(tmp_path, "ui", "--home", str(tmp_path), "--port", str(port))
    started.append(proc)
    _wait_answering(proc, f"http://127.0.0.1:{port}/")
    time.sleep(2.0)  # its job consumers start after the server answers
    assert len(descendants(proc.pid)) >= 2, "expected mlflow's server and its workers below `rlloop ui`"
    _stop_and_check(proc, sig)


@pytest.fixture(scope="module")
def tiny_base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A random tiny model: the grader loads it and scores its baseline, which is all these tests need."""
    return make_tiny_model(tmp_path_factory.mktemp("base") / "tiny-base", seed=0)


@pytest.mark.slow  # loads a tiny model; the grader scores its baseline
def test_grade_serve_sigterm_stops_the_grader(
    tmp_path: Path, tiny_base: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    port = free_port()
    proc = _start(
        tmp_path,
        "grade",
        "serve",
        "--home",
        str(tmp_path),
        "--base-model",
        str(tiny_base),
        "--port",
        str(port),
        "--eval-limit",
        "8",
        "--submissions-root",
        str(tmp_path / "outputs"),
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
from agent.processes.children import run_child
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


# A run-like parent: starts the run's grader (agent.run.grading.GraderProcess), prints its pid once it is ready; on
# SIGTERM it stops it on the way out, as the run does.
RUN_PARENT = """
import signal, sys
from pathlib import Path
from agent.run.grading import GraderProcess
from agent.run.workspace import RunPaths

signal.signal(signal.SIGTERM, lambda *_: sys.exit(143))
grader = GraderProcess.load_or_create(
    RunPaths(Path(sys.argv[1]), "r1"), benchmark="arith", base_model=Path(sys.argv[2]), max_submissions=None,
    min_interval_s=0.0, public_fraction=0.0, eval_limit=4, eval_batch_size=4,
)
try:
    grader.start(ready_timeout_s=300)
    print(grader.child.pid, flush=True)
    signal.pause()
finally:
    grader.stop()
"""


@pytest.mark.slow  # loads a tiny model; the grader scores its baseline
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_the_runs_grader_stops_with_the_run(
    sig: int, tmp_path: Path, tiny_base: Path, started: list[subprocess.Popen[bytes]]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", RUN_PARENT, str(tmp_path), str(tiny_base)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        start_new_session=True,
    )
    started.append(proc)
    assert proc.stdout is not None
    line = proc.stdout.readline()
    assert line.strip(), f"the grader did not start (exit code {proc.wait()})"
    grader = int(line)
    tree_before = {grader, *descendants(proc.pid)}
    assert "grader" in cmdline(grader)
    proc.send_signal(sig)
    proc.wait(timeout=30)
    # SIGKILL: nothing ran in the parent; the grader's parent-death signal and its keeper end it
    left = still_alive(tree_before, within_s=5.0)
    assert not left, f"left running after {signal.Signals(sig).name}: {left}"


# A parent that runs a shell through run_child; the shell starts a helper in a session of its own whose parent exits
# at once (a double fork), so only the subreaper (run_child's process) can find it, and prints the helper's pid.
ESCAPING = """
import sys
from agent.processes.children import run_child
sys.exit(run_child(["sh", "-c", "(setsid sh -c 'echo $$; exec sleep 300' &); sleep 300"]))
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_run_child_stops_helpers_that_left_the_group(
    sig: int, started: list[subprocess.Popen[bytes]]
) -> None:
    proc = subprocess.Popen(
        [sys.executable, "-c", ESCAPING], cwd=ROOT, stdout=subprocess.PIPE, start_new_session=True
    )
    started.append(proc)
    assert proc.stdout is not None
    helper = int(proc.stdout.readline())
    deadline = time.monotonic() + 10
    while helper not in descendants(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # its parent is exiting; then it is reparented to the subreaper
    assert helper in descendants(proc.pid) and os.getsid(helper) == helper
    proc.send_signal(sig)
    proc.wait(timeout=15)
    assert not still_alive([helper], within_s=5.0)


def test_a_spawned_child_is_stopped_with_its_whole_tree() -> None:
    child = spawn_child(["sh", "-c", "sleep 300 & setsid sleep 300 & wait"])
    deadline = time.monotonic() + 10
    while len(tree(child.pid)) < 2 and time.monotonic() < deadline:
        time.sleep(0.05)
    below = tree(child.pid)
    assert len(below) == 2
    assert child.stop(grace_s=5.0) == -signal.SIGTERM
    assert not still_alive(below, within_s=5.0)


def test_kill_tree_kills_what_ignores_sigterm() -> None:
    proc = subprocess.Popen(["sh", "-c", "trap '' TERM; sleep 300 & wait"], start_new_session=True)
    deadline = time.monotonic() + 10
    while not tree(proc.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    below = tree(proc.pid)
    started_at = time.monotonic()
    kill_tree(proc.pid, grace_s=0.5)
    assert proc.wait(timeout=5) == -signal.SIGKILL
    assert time.monotonic() - started_at < 5
    assert not still_alive(below, within_s=5.0)


def test_interrupt_lets_the_child_stop_its_own_way_then_kills_what_is_left(tmp_path: Path) -> None:
    """How a sweep's worker is stopped: SIGTERM to it alone (no keeper), then its leftovers are killed."""
    said = tmp_path / "said"
    polite = spawn_child(
        ["sh", "-c", f"trap 'echo bye > {said}; exit 0' TERM; sleep 300 & wait"], keeper=False
    )
    deadline = time.monotonic() + 10
    while not tree(polite.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    left = tree(polite.pid)
    assert polite.interrupt(grace_s=10.0) == 0 and said.read_text().strip() == "bye"
    assert not still_alive(left, within_s=5.0)
    stubborn = spawn_child(["sh", "-c", "trap '' TERM; sleep 300 & wait"], keeper=False)
    deadline = time.monotonic() + 10
    while not tree(stubborn.pid) and time.monotonic() < deadline:
        time.sleep(0.05)  # its trap is set once its sleep runs
    started_at = time.monotonic()
    assert stubborn.interrupt(grace_s=0.5) == -signal.SIGKILL and time.monotonic() - started_at < 5


# A parent that starts a detached child (as the service starts its run workers), prints its pid and exits.
DETACHING_PARENT = """
import subprocess
from agent.processes.children import spawn_child
child = spawn_child(
    ["sleep", "300"], death_signal=None, keeper=False, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
)
print(child.pid, flush=True)
"""


def test_a_detached_child_outlives_its_parent() -> None:
    out = subprocess.run(
        [sys.executable, "-c", DETACHING_PARENT], cwd=ROOT, capture_output=True, text=True, timeout=60
    )
    pid = int(out.stdout)
    try:
        time.sleep(0.5)  # a parent-death signal or a keeper would have ended it by now
        assert alive(pid) and os.getsid(pid) == pid
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pid, signal.SIGKILL)
