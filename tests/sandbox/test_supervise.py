"""The supervision every backend shares: request checks, limits, the deadline and output watch, and the verdict."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from pydantic import ValidationError

from sandbox import supervise
from sandbox.base import SandboxRequest, SandboxResult
from sandbox.logstream import CappedLog


def request(workspace: Path, **kw: object) -> SandboxRequest:
    return SandboxRequest(command=["true"], workspace=workspace, log_path=workspace.parent / "log.txt", **kw)  # type: ignore[arg-type]


def supervisor(req: SandboxRequest, poll_s: float = 0.05) -> supervise.Supervisor:
    return supervise.Supervisor(req, CappedLog(req.log_path, req.max_log_bytes), poll_s)


def test_network_is_one_of_the_known_values(workspace: Path) -> None:
    assert request(workspace, network="grader").network == "grader"
    with pytest.raises(ValidationError, match="network"):
        request(workspace, network="host")
    unchecked = request(workspace).model_copy(update={"network": "host"})  # model_copy does not validate
    with pytest.raises(ValueError, match="unknown network 'host'"):
        supervise.check_request(unchecked)


def test_check_request_refuses_what_no_backend_can_run(workspace: Path, tmp_path: Path) -> None:
    supervise.check_request(request(workspace))
    with pytest.raises(ValueError, match="empty command"):
        supervise.check_request(request(workspace).model_copy(update={"command": []}))
    with pytest.raises(ValueError, match="is not a folder"):
        supervise.check_request(request(workspace).model_copy(update={"workspace": tmp_path / "missing"}))


def test_run_leased_checks_before_running(workspace: Path) -> None:
    ran: list[SandboxRequest] = []

    def run(req: SandboxRequest) -> SandboxResult:
        ran.append(req)
        return SandboxResult(exit_code=0, log_path=req.log_path, duration_s=0.0)

    bad = request(workspace).model_copy(update={"command": []})
    with pytest.raises(ValueError):
        supervise.run_leased(bad, run)
    assert not ran
    assert supervise.run_leased(request(workspace), run).ok and len(ran) == 1


def test_rlimits_name_cpu_and_file_size(workspace: Path) -> None:
    assert supervise.rlimits(request(workspace, max_output_mb=None)) == {}
    limits = supervise.rlimits(request(workspace, cpu_time_s=10, max_output_mb=2))
    assert limits == {"cpu": (10, 10 + supervise.CPU_GRACE_S), "fsize": (2 * 2**20, 2 * 2**20)}


def test_labels_match() -> None:
    labels = {"rlloop.run": "R", "rlloop.trial": "t01"}
    assert supervise.labels_match(labels, None)
    assert supervise.labels_match(labels, {"rlloop.run": "R"})
    assert not supervise.labels_match(labels, {"rlloop.run": "R", "rlloop.trial": "t02"})


def test_a_command_that_exits_keeps_its_exit_code(workspace: Path) -> None:
    sup = supervisor(request(workspace))
    sup.watch(lambda timeout: True, stopping="it")
    sup.finish(oom_killed=False)
    result = sup.result(3, "fake")
    assert result.exit_code == 3 and not result.timed_out and result.backend == "fake"


def test_deadline_stops_the_wait_and_says_so(workspace: Path) -> None:
    sup = supervisor(request(workspace, timeout_s=0.3))

    def exited(timeout: float) -> bool:
        time.sleep(timeout)
        return False

    sup.watch(exited, stopping="the test command")
    assert sup.timed_out and time.monotonic() - sup.started >= 0.3
    sup.finish(oom_killed=False)
    result = sup.result(0, "fake")
    assert result.exit_code is None and result.timed_out and not result.ok
    assert "wall-clock limit of 0.3s reached: stopping the test command" in result.log_tail


def test_workspace_growth_past_the_limit_stops_the_wait(workspace: Path) -> None:
    sup = supervisor(request(workspace, max_output_mb=1, timeout_s=30))

    def exited(timeout: float) -> bool:
        (workspace / "big.bin").write_bytes(b"x" * (2 * 2**20))
        time.sleep(timeout)
        return False

    sup.watch(exited, stopping="the test command")
    assert sup.output_exceeded and not sup.timed_out
    sup.finish(oom_killed=False)
    result = sup.result(0, "fake")
    assert result.exit_code is None and result.output_limit_exceeded
    assert "past max_output_mb=1: stopping the test command" in result.log_tail


def test_interruption_ends_the_wait_and_marks_the_result(workspace: Path) -> None:
    sup = supervisor(request(workspace, timeout_s=30))
    killed: list[bool] = []
    stop = sup.stopper(lambda: killed.append(True))
    calls = 0

    def exited(timeout: float) -> bool:
        nonlocal calls
        calls += 1
        if calls == 2:
            stop()
        return False

    sup.watch(exited, stopping="it")
    assert killed == [True] and sup.interrupted.is_set()
    sup.finish(oom_killed=True)
    result = sup.result(0, "fake")
    assert result.interrupted and result.oom_killed and result.exit_code is None
    assert "out of memory" in result.log_tail
