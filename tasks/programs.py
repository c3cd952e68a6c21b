"""Run model-written Python programs, each in its own process with a wall-clock, CPU and memory limit.

Why a process per program: a completion may loop forever, allocate without end, fork, write files or call
`os._exit(0)`. Each program gets a fresh private folder as cwd, HOME and TMPDIR, a minimal environment, no stdin,
RLIMIT_AS (memory), RLIMIT_CPU, RLIMIT_FSIZE and no core files (set by the harness before it reads the program);
at the end its session is killed, every process that still carries its marker variable too, and its folder is
removed.

A program passes only if it runs to its end: the harness prints a token that the program's text never holds
(handed over on stdin, kept only in the harness's own frame) after the program returns, so `exit(0)`,
`os._exit(0)` or a killed process read as a failure, not a pass. This is no defence against code that inspects the
harness's own memory; it stops the shortcuts a policy finds first.

This module is the isolation *inside* a sandbox, never a sandbox itself: trials call it in their own sandbox
(tasks.humaneval), and the grader runs it as `python -m tasks.programs JOB` in a namespace sandbox of its own
(grader/code_exec.py), where each finished program's outcome is printed as one line `<nonce> <json>` on stdout.
Standard library only, so it starts fast in any environment.
"""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import secrets
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path

from tasks import procfs

MARKER_ENV = "RLLOOP_PROGRAM_ID"
MB = 1024 * 1024
MAX_OUTPUT_BYTES = 4 * MB  # any one file a program writes, its stdout and stderr included
_PR_SET_DUMPABLE = 4
# Set the limits (argv: bytes of address space, CPU seconds, bytes per file), read the token and the program, run it
# as __main__, then print the token: only a program that returned does. Limits are set here, not in a preexec_fn,
# because the batch worker starts programs from several threads.
_HARNESS = """\
import resource, sys
def _main():
    for _k, _v in zip(("AS", "CPU", "FSIZE"), sys.argv[1:4]):
        resource.setrlimit(getattr(resource, "RLIMIT_" + _k), (int(_v), int(_v)))
    resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    sys.argv[:] = ["program.py"]
    _t = sys.stdin.readline().strip().encode()
    _src = sys.stdin.read()
    sys.stdin.close()
    _code = compile(_src, "program.py", "exec")
    del _src
    _out = sys.stdout
    _w = __import__("os").write
    exec(_code, {"__name__": "__main__", "__builtins__": __builtins__})
    _out.flush()
    sys.stdout.flush()
    _w(1, b"\\n" + _t + b"\\n")
_main()
"""


@dataclass(frozen=True)
class Limits:
    """Per-program limits. `memory_mb` caps the address space (RLIMIT_AS), so it must leave room for Python."""

    timeout_s: float = 5.0
    memory_mb: int = 1024


@dataclass(frozen=True)
class Outcome:
    """How one program ended: `status` is passed, failed, timed out, out of memory or error; `detail` says why."""

    status: str
    detail: str = ""
    seconds: float = 0.0

    @property
    def passed(self) -> bool:
        return self.status == "passed"


def _limit_args(limits: Limits) -> list[str]:
    """The harness's argv: address space, CPU seconds (the wall-clock limit, rounded up, plus one), file size."""
    return [str(limits.memory_mb * MB), str(int(limits.timeout_s) + 1), str(MAX_OUTPUT_BYTES)]


def _kill_all(leader: int, marker: str) -> None:
    """SIGKILL the program's session and everything carrying its marker, until none is left (or 2 s pass)."""
    deadline = time.monotonic() + 2.0
    while True:
        with contextlib.suppress(OSError):
            os.killpg(leader, signal.SIGKILL)
        left = [p for p in procfs.carrying(marker) if p != os.getpid()]  # inherited, also outside the session
        for pid in left:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
        if not left or time.monotonic() > deadline:
            return
        time.sleep(0.02)


def _judge(returncode: int, stdout: bytes, stderr: bytes, token: bytes, limits: Limits) -> Outcome:
    tail = stderr.decode(errors="replace").strip().splitlines()
    last = tail[-1][:300] if tail else ""
    if returncode == 0 and stdout.rstrip(b"\n").rsplit(b"\n", 1)[-1] == token:
        return Outcome("passed")
    if "MemoryError" in last:
        return Outcome("out of memory", last or f"memory limit {limits.memory_mb} MB")
    if returncode == -signal.SIGXCPU:
        return Outcome("timed out", f"CPU-time limit {int(limits.timeout_s) + 1}s")
    if returncode == 0:
        return Outcome("failed", "exited before the end of the program")
    return Outcome("failed", last or f"exit code {returncode}")


def run_program(source: str, limits: Limits = Limits()) -> Outcome:
    """Run `source` as a script in a fresh folder and process; passed when it ran to its end within the limits."""
    token = secrets.token_hex(16).encode()
    marker = f"{MARKER_ENV}={secrets.token_hex(8)}"
    start = time.monotonic()
    folder = tempfile.mkdtemp(prefix="rlloop-program-")
    try:
        with (
            open(os.path.join(folder, ".out"), "w+b") as out,
            open(os.path.join(folder, ".err"), "w+b") as err,
        ):
            env = {
                "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
                "HOME": folder,
                "TMPDIR": folder,
                "LANG": "C.UTF-8",
                "PYTHONHASHSEED": "0",
                MARKER_ENV: marker.partition("=")[2],
            }
            proc = subprocess.Popen(
                [sys.executable, "-I", "-B", "-c", _HARNESS, *_limit_args(limits)],
                cwd=folder,
                env=env,
                stdin=subprocess.PIPE,
                stdout=out,
                stderr=err,
                start_new_session=True,
                close_fds=True,
            )
            try:
                assert proc.stdin is not None
                with contextlib.suppress(BrokenPipeError):
                    proc.stdin.write(token + b"\n" + source.encode(errors="replace"))
                    proc.stdin.close()
                returncode: int | None = proc.wait(timeout=limits.timeout_s)
            except subprocess.TimeoutExpired:
                returncode = None
            finally:
                _kill_all(proc.pid, marker)
                proc.wait()
            seconds = time.monotonic() - start
            if returncode is None:
                return Outcome("timed out", f"wall-clock limit {limits.timeout_s:g}s", seconds)
            out.seek(0, os.SEEK_END)
            out.seek(max(0, out.tell() - 4096))
            err.seek(0, os.SEEK_END)
            err.seek(max(0, err.tell() - 4096))
            outcome = _judge(returncode, out.read(), err.read(), token, limits)
            return Outcome(outcome.status, outcome.detail, seconds)
    except OSError as exc:
        return Outcome("error", f"could not run the program: {exc}", time.monotonic() - start)
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def run_programs(
    sources: Sequence[str],
    limits: Limits = Limits(),
    workers: int = 1,
    on_done: Callable[[int, Outcome], None] | None = None,
) -> list[Outcome]:
    """Every program, `workers` at a time; `on_done(index, outcome)` as each one finishes."""

    def one(index: int) -> Outcome:
        outcome = run_program(sources[index], limits)
        if on_done is not None:
            on_done(index, outcome)
        return outcome

    with ThreadPoolExecutor(max_workers=max(1, workers)) as pool:
        return list(pool.map(one, range(len(sources))))


def main(argv: Sequence[str]) -> int:
    """The grader's batch worker: JOB is a JSON file {nonce, timeout_s, memory_mb, workers, programs}, removed
    once read. Not dumpable, so the programs (the same uid) cannot read its memory or write to its stdout."""
    if len(argv) != 1:
        print("usage: python -m tasks.programs JOB.json", file=sys.stderr)
        return 2
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_DUMPABLE, 0, 0, 0, 0)
    job_path = Path(argv[0])
    job = json.loads(job_path.read_text(encoding="utf-8"))
    job_path.unlink()
    nonce = str(job["nonce"])
    limits = Limits(timeout_s=float(job["timeout_s"]), memory_mb=int(job["memory_mb"]))
    lock = threading.Lock()

    def report(index: int, outcome: Outcome) -> None:
        with lock:
            sys.stdout.write(f"{nonce} {json.dumps({'index': index, **asdict(outcome)})}\n")
            sys.stdout.flush()

    run_programs(list(job["programs"]), limits, int(job["workers"]), report)
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
