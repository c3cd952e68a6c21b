"""Why an external agent failed, from the last lines of its log: the one line a person needs ("agent failed:
ModuleNotFoundError: No module named 'requests'") and the tail they would otherwise dig out of the log file."""

from __future__ import annotations

import re
from pathlib import Path

from pydantic import BaseModel

from sandbox.base import SandboxResult

TAIL_LINES = 15
TAIL_BYTES = 64 * 1024
# A Python traceback's last line ("ModuleNotFoundError: ...", "requests.exceptions.HTTPError: ..."), or a shell's
# own complaint ("start.sh: line 3: foo: command not found", "python: can't open file ...").
_PYTHON_ERROR = re.compile(r"^(?:[A-Za-z_][\w.]*\.)?[A-Z]\w*(?:Error|Exception|Exit|Interrupt|Failure)\b.*")
_SHELL_ERROR = re.compile(
    r"(command not found|No such file or directory|can't open file|Permission denied|syntax error|unbound variable)"
)


class AgentFailure(BaseModel):
    """What the console, the sweep table, results, MLflow and the report say about a failed agent."""

    reason: str  # "agent failed: <error line>"
    error: str  # the error line alone
    exit_code: int | None
    tail: list[str]  # the log's last lines


def log_tail(path: Path, lines: int = TAIL_LINES) -> list[str]:
    """The last `lines` non-empty lines of the log (only its last 64 KiB are read)."""
    from sandbox import untrusted

    try:  # the host's capture of the agent's output; read without following a link, never blocking
        text = untrusted.tail_text(path.parent, path.name, max_bytes=TAIL_BYTES)
    except OSError:
        return []
    return [line.rstrip() for line in text.splitlines() if line.strip()][-lines:]


def error_line(tail: list[str]) -> str | None:
    """The line that says what went wrong: a Python exception's, else a shell error's, else None."""
    for pattern in (_PYTHON_ERROR, _SHELL_ERROR):
        for line in reversed(tail):
            if pattern.search(line.strip()):
                return line.strip()
    return None


def diagnose(result: SandboxResult, log_path: Path) -> AgentFailure | None:
    """None when the agent exited 0 (or was interrupted: that is not the agent's failure); else what failed."""
    if result.ok or result.interrupted:
        return None
    tail = log_tail(log_path)
    found = error_line(tail)
    if result.timed_out or result.oom_killed or result.output_limit_exceeded:
        error = result.reason()  # the sandbox stopped it: that, not its last words, is why
    elif found is not None:
        error = found
    else:
        last = f"{tail[-1].strip()[:300]}; " if tail else ""
        error = f"{last}exit code {result.exit_code}"
    return AgentFailure(reason=f"agent failed: {error}", error=error, exit_code=result.exit_code, tail=tail)
