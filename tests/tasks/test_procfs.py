"""The one /proc reader: a process's stat fields, its environment, and one rule for a process that is gone."""

from __future__ import annotations

import os
import subprocess
import time

from tasks import procfs


def test_stat_reads_this_process() -> None:
    me = procfs.stat(os.getpid())
    assert me is not None and not me.gone
    assert (me.ppid, me.pgid) == (os.getppid(), os.getpgid(0))
    assert procfs.start_time(os.getpid()) == me.start and procfs.parent_of(os.getpid()) == os.getppid()
    assert os.getpid() in procfs.table() and procfs.cmdline(os.getpid())


def test_a_zombie_is_gone_for_every_reader() -> None:
    proc = subprocess.Popen(["true"])
    deadline = time.monotonic() + 10
    while (found := procfs.stat(proc.pid)) is not None and not found.gone and time.monotonic() < deadline:
        time.sleep(0.02)  # exited, not yet reaped: a zombie
    try:
        assert found is not None and found.state in procfs.GONE_STATES
        assert not procfs.alive(proc.pid)
        assert not procfs.same_process_alive(proc.pid, found.start)
    finally:
        proc.wait()
    assert (
        procfs.stat(proc.pid) is None and procfs.start_time(proc.pid) is None and not procfs.alive(proc.pid)
    )


def test_same_process_alive_tells_a_reused_pid_apart() -> None:
    start = procfs.start_time(os.getpid())
    assert procfs.same_process_alive(os.getpid(), start) and procfs.same_process_alive(os.getpid(), None)
    assert not procfs.same_process_alive(os.getpid(), "0" if start != "0" else "1")
    assert not procfs.same_process_alive(None, start)


def test_processes_are_found_by_their_environment() -> None:
    marker = f"rlloop-test-{os.getpid()}"
    proc = subprocess.Popen(["sleep", "30"], env={**os.environ, "RLLOOP_TEST_MARK": marker})
    try:
        assert procfs.with_env("RLLOOP_TEST_MARK").get(proc.pid) == marker
        assert procfs.carrying(f"RLLOOP_TEST_MARK={marker}") == {proc.pid}
        assert proc.pid not in procfs.carrying("RLLOOP_TEST_MARK=something-else")
    finally:
        proc.kill()
        proc.wait()
