"""What a killed run left is ended before it goes on, and named in its log: a grader on its store (even one that
sits on SIGTERM), trial containers; and a grader dies with its run even when it ignores SIGTERM."""

from __future__ import annotations

import signal
import subprocess
import sys
import time
import uuid
from pathlib import Path

import pytest

from agent.run.grading import stop_stale_grader
from agent.run.leftovers import end_leftovers
from agent.run.reporting import Reporter
from agent.run.workspace import RunPaths
from tests.support.processes import alive, still_alive

# Looks like a grader of that run to /proc (its cmdline names `grader` and the run's grader folder); ignores SIGTERM
# the way a grader busy in an evaluation does.
FAKE_GRADER = "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); print('up', flush=True); time.sleep(300)"


def _fake_grader(paths: RunPaths) -> subprocess.Popen[str]:
    paths.grader_dir.mkdir(parents=True, exist_ok=True)
    proc = subprocess.Popen(
        [
            sys.executable,
            "-c",
            FAKE_GRADER,
            "grader",
            "serve",
            "--config",
            str(paths.grader_dir / "config.json"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    assert proc.stdout is not None and proc.stdout.readline().strip() == "up"
    (paths.grader_dir / "server.pid").write_text(str(proc.pid))
    return proc


def test_stale_grader_is_ended_even_when_it_ignores_sigterm(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    proc = _fake_grader(paths)
    try:
        started = time.monotonic()
        assert stop_stale_grader(paths) == f"grader process (pid {proc.pid})"
        assert proc.wait(timeout=10) == -signal.SIGKILL
        assert time.monotonic() - started < 10
    finally:
        proc.kill()
        proc.wait()


def test_a_pid_that_is_no_longer_a_grader_is_left_alone(tmp_path: Path) -> None:
    paths = RunPaths(tmp_path, "r1")
    paths.grader_dir.mkdir(parents=True)
    other = subprocess.Popen(["sleep", "30"])
    try:
        (paths.grader_dir / "server.pid").write_text(str(other.pid))
        assert stop_stale_grader(paths) is None
        assert alive(other.pid)
    finally:
        other.kill()
        other.wait()


# A run-like parent: starts a child that ignores SIGTERM with the grader's parent-death signal, prints its pid.
PARENT = """
import signal, subprocess, sys, time
from agent.processes.children import die_with_parent
child = subprocess.Popen(
    [sys.executable, "-c", "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); time.sleep(300)"],
    preexec_fn=die_with_parent(signal.SIGKILL),
)
print(child.pid, flush=True)
time.sleep(300)
"""


def test_a_busy_grader_dies_with_its_run_killed_9() -> None:
    root = Path(__file__).resolve().parents[3]
    parent = subprocess.Popen([sys.executable, "-c", PARENT], cwd=root, stdout=subprocess.PIPE, text=True)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert alive(child)
        parent.kill()
        parent.wait(timeout=10)
        assert not still_alive([child], within_s=5.0)
    finally:
        parent.kill()
        parent.wait()


@pytest.mark.docker
def test_leftovers_are_ended_and_named_in_the_run_log(tmp_path: Path) -> None:
    from sandbox.backends.docker import DockerSandbox
    from tests.sandbox.docker_support import IMAGE, require_docker

    require_docker()
    run_id = f"test-{uuid.uuid4().hex[:8]}"
    paths = RunPaths(tmp_path, run_id)
    paths.run_dir.mkdir(parents=True)
    sandbox = DockerSandbox(image=IMAGE)
    sandbox.client.containers.create(
        IMAGE, command=["true"], labels={"rlloop.managed": "true", **paths.labels, "rlloop.trial": "t03"}
    )
    # the same run id under another home (another user's, another test's): not this run's to end
    elsewhere = RunPaths(tmp_path / "elsewhere", run_id).labels
    theirs = sandbox.client.containers.create(
        IMAGE, command=["true"], labels={"rlloop.managed": "true", **elsewhere, "rlloop.trial": "t03"}
    )
    grader = _fake_grader(paths)
    reporter = Reporter(paths.log_file, quiet=True)
    try:
        ended = end_leftovers(sandbox, paths, reporter)
    finally:
        reporter.close()
        grader.kill()
        grader.wait()
        sandbox.close()
    assert ended == ["trial container of t03 (created)", f"grader process (pid {grader.pid})"]
    log = paths.log_file.read_text()
    assert (
        f"ended 1 leftover trial container of t03 (created), 1 leftover grader process (pid {grader.pid}) "
        "from the previous attempt" in log
    )
    left = sandbox.client.containers.list(all=True, filters={"label": f"rlloop.run={run_id}"})
    assert [c.id for c in left] == [theirs.id]
    theirs.remove(force=True)
