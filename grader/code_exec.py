"""Execute model-written programs for the grader: a whole batch in ONE namespace sandbox, never in this process.

The batch worker (`python -m tasks.programs`) runs in the local backend's isolation (sandbox.namespaces: its own
mount, PID, network, IPC and UTS namespaces, a loopback of its own, the system read-only, a private /tmp, a non-root
uid with no capabilities, a memory cgroup where one can be made), and there runs each program in a process of its
own with the per-program limits (tasks.programs.Limits). The job and the workspace live in temporary folders that
are removed afterwards; the sandbox ends every process it started. Where namespaces cannot be made the grader
refuses to run code at all: `CodeExecutionUnavailableError` names what to install.

Outcomes come back on the worker's stdout, one line per program, each prefixed with a nonce only the worker knew;
a worker that dies (a program killed it) costs a rerun of its unreported programs one per sandbox, so one hostile
program fails alone.
"""

from __future__ import annotations

import json
import math
import secrets
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path

from sandbox.backends.local import LocalSandbox
from sandbox.base import SandboxRequest, SandboxUnavailableError
from tasks.programs import Limits, Outcome

SANDBOX_MARGIN_MB = 512  # the worker itself, on top of the programs running at once
STARTUP_S = 60.0  # sandbox and interpreter start, on top of the programs' own limits
DEFAULT_LIMITS = Limits()


class CodeExecutionUnavailableError(RuntimeError):
    """This machine cannot isolate model-written code; the message says what to install or enable."""


def _sandbox() -> LocalSandbox:
    try:
        return LocalSandbox(isolate=True, grace_s=1.0, output_poll_s=30.0)
    except SandboxUnavailableError as exc:
        raise CodeExecutionUnavailableError(
            f"the grader executes model-written code only inside a namespace sandbox, and none can be made: {exc}"
        ) from None


def _batch(programs: Sequence[str], limits: Limits, workers: int) -> dict[int, Outcome]:
    """Run `programs` in one sandbox; the outcomes it reported (all of them unless the worker died)."""
    nonce = secrets.token_hex(16)
    with (
        tempfile.TemporaryDirectory(prefix="rlloop-exec-") as workspace,
        tempfile.TemporaryDirectory(prefix="rlloop-exec-log-") as logs,
    ):
        job = Path(workspace) / "job.json"
        job.write_text(
            json.dumps(
                {
                    "nonce": nonce,
                    "timeout_s": limits.timeout_s,
                    "memory_mb": limits.memory_mb,
                    "workers": workers,
                    "programs": list(programs),
                }
            ),
            encoding="utf-8",
        )
        rounds = math.ceil(len(programs) / workers)
        request = SandboxRequest(
            command=[sys.executable, "-I", "-m", "tasks.programs", str(job)],
            workspace=Path(workspace),
            log_path=Path(logs) / "worker.log",
            timeout_s=STARTUP_S + rounds * (limits.timeout_s + 3.0),
            memory_mb=workers * limits.memory_mb + SANDBOX_MARGIN_MB,
            max_processes=64 * workers,
            max_output_mb=64,
            max_log_bytes=4 * 1024 * 1024,
            network="none",
            env={"TMPDIR": workspace},  # the programs' folders: inside the workspace, removed with it
            labels={"rlloop.role": "code-exec"},
        )
        _sandbox().run(request)
        return _parse(
            Path(request.log_path).read_text(encoding="utf-8", errors="replace"), nonce, len(programs)
        )


def _parse(log: str, nonce: str, count: int) -> dict[int, Outcome]:
    found: dict[int, Outcome] = {}
    prefix = f"{nonce} "
    for line in log.splitlines():
        if not line.startswith(prefix):
            continue
        try:
            row = json.loads(line[len(prefix) :])
            index = int(row["index"])
            outcome = Outcome(str(row["status"]), str(row.get("detail", "")), float(row.get("seconds", 0.0)))
        except (ValueError, KeyError, TypeError):
            continue
        if 0 <= index < count:
            found.setdefault(index, outcome)
    return found


def execute(programs: Sequence[str], limits: Limits = DEFAULT_LIMITS, workers: int = 4) -> list[Outcome]:
    """Each program's outcome, in order. Raises `CodeExecutionUnavailableError` where code cannot be isolated."""
    if not programs:
        return []
    workers = max(1, min(workers, len(programs)))
    done = _batch(programs, limits, workers)
    for index in [i for i in range(len(programs)) if i not in done]:
        alone = _batch([programs[index]], limits, 1) if len(programs) > 1 else {}
        done[index] = alone.get(0, Outcome("error", "the program ended the sandbox it ran in"))
    return [done[i] for i in range(len(programs))]
