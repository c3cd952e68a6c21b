"""The docker backend contains hostile trial commands, reports what happened, and leaves no container behind.

Each test runs a command that tries to break out one way; the test checks the attempt failed, the result says
why, and no container with the test's labels remains.
"""

from __future__ import annotations

import http.server
import os
import signal
import socket
import socketserver
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from sandbox.backends.docker import DockerSandbox
from sandbox.base import Mount, SandboxRequest, SandboxResult
from sandbox.dockerlib import docker_sdk
from tests.sandbox.docker_support import IMAGE, require_docker

pytestmark = pytest.mark.docker


@pytest.fixture(scope="module")
def sandbox() -> Iterator[DockerSandbox]:
    require_docker()
    box = DockerSandbox(image=IMAGE, grace_s=1, output_poll_s=0.3)
    yield box
    box.close()


@pytest.fixture()
def labels(sandbox: DockerSandbox) -> Iterator[dict[str, str]]:
    """Unique labels per test; afterwards no container carrying them may exist."""
    mine = {"rlloop.run": f"test-{uuid.uuid4().hex[:8]}", "rlloop.trial": "t1"}
    yield mine
    left = sandbox.client.containers.list(all=True, filters={"label": [f"{k}={v}" for k, v in mine.items()]})
    assert not left, f"containers left behind: {[c.id for c in left]}"


@pytest.fixture()
def run_dir(tmp_path: Path) -> Path:
    """A run folder like the real one: workspace/ beside a private grader/ and a read-only base model."""
    (tmp_path / "workspace").mkdir()
    (tmp_path / "grader").mkdir()
    (tmp_path / "grader" / "test.jsonl").write_text('{"id": 1, "answer": "42"}\n')
    (tmp_path / "models" / "base").mkdir(parents=True)
    (tmp_path / "models" / "base" / "config.json").write_text("{}")
    return tmp_path


def run(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str], code: str, **kw: object
) -> SandboxResult:
    ws = run_dir / "workspace"
    request = SandboxRequest(
        command=["python3", "-c", code],
        workspace=ws,
        log_path=run_dir / "trial.log",
        labels=labels,
        **kw,  # type: ignore[arg-type]
    )
    return sandbox.run(request)


PROBE = """
import sys
def attempt(name, fn):
    try:
        fn()
        print("ALLOWED", name, flush=True)
    except Exception as exc:
        print("BLOCKED", name, type(exc).__name__, flush=True)
"""


def outcomes(result: SandboxResult) -> dict[str, str]:
    lines = result.log_path.read_text().splitlines()
    return {
        parts[1]: parts[0]
        for parts in (line.split() for line in lines)
        if parts and parts[0] in ("ALLOWED", "BLOCKED")
    }


def test_runs_as_non_root_in_workspace(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    code = "import os; print('uid', os.getuid(), 'cwd', os.getcwd()); open('out.txt', 'w').write('ok')"
    result = run(sandbox, run_dir, labels, code)
    assert result.ok, result.log_tail
    assert f"cwd {run_dir / 'workspace'}" in result.log_tail and "uid 0 " not in result.log_tail
    assert (run_dir / "workspace" / "out.txt").read_text() == "ok"
    assert result.image_digest and result.image_digest.startswith("sha256:")


def test_trials_cannot_reach_the_hidden_test_split(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    """The image and its live mounts carry tasks/ and trainers/ only: no grader to regenerate the test set with."""
    code = (
        PROBE
        + """
import tasks
attempt("import_grader", lambda: __import__("grader"))
attempt("import_agent", lambda: __import__("agent"))
attempt("import_sandbox", lambda: __import__("sandbox"))
attempt("arith_test", lambda: tasks.get_benchmark("arith").load("test"))
attempt("arith_train", lambda: print("TRAIN", len(tasks.get_benchmark("arith").load("train"))))
try:
    tasks.get_benchmark("countdown").load("test")
except tasks.HeldOutSplitError as exc:
    print("REFUSED", exc)
"""
    )
    result = run(sandbox, run_dir, labels, code)
    assert result.ok, result.log_tail
    assert outcomes(result) == {
        "import_grader": "BLOCKED",
        "import_agent": "BLOCKED",
        "import_sandbox": "BLOCKED",
        "arith_test": "BLOCKED",
        "arith_train": "ALLOWED",
    }
    log = result.log_path.read_text()
    assert "TRAIN 12000" in log and "REFUSED the test split of countdown is held by the grader only" in log


def test_files_outside_the_workspace(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    base = run_dir / "models" / "base"
    code = (
        PROBE
        + f"""
attempt("read_hidden_test_data", lambda: open({str(run_dir / "grader" / "test.jsonl")!r}).read())
attempt("write_scores_json", lambda: open({str(run_dir / "scores.json")!r}, "w").write("{{}}"))
attempt("write_base_model", lambda: open({str(base / "config.json")!r}, "w").write("pwned"))
attempt("new_file_in_base_model", lambda: open({str(base / "x")!r}, "w").write("pwned"))
attempt("read_base_model", lambda: open({str(base / "config.json")!r}).read())
attempt("write_etc", lambda: open("/etc/rlloop-pwned", "w").write("x"))
attempt("write_home", lambda: open("/home/rlloop/x", "w").write("x"))
attempt("write_workspace", lambda: open("ok.txt", "w").write("x"))
"""
    )
    result = run(sandbox, run_dir, labels, code, mounts=[Mount(source=base)])
    seen = outcomes(result)
    assert result.ok, result.log_tail
    assert seen == {
        "read_hidden_test_data": "BLOCKED",
        "write_scores_json": "BLOCKED",
        "write_base_model": "BLOCKED",
        "new_file_in_base_model": "BLOCKED",
        "read_base_model": "ALLOWED",
        "write_etc": "BLOCKED",
        "write_home": "BLOCKED",
        "write_workspace": "ALLOWED",
    }
    assert (base / "config.json").read_text() == "{}"
    assert not (run_dir / "scores.json").exists()


class _Listener:
    """A real TCP listener on the host that counts connections."""

    def __init__(self, host: str) -> None:
        self.server = socket.create_server((host, 0))
        self.port = self.server.getsockname()[1]
        self.accepted = 0
        threading.Thread(target=self._loop, daemon=True).start()

    def _loop(self) -> None:
        while True:
            try:
                conn, _ = self.server.accept()
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self.server.close()


def _docker0_gateway() -> str:
    import ipaddress

    docker = docker_sdk()

    config = docker.from_env().networks.get("bridge").attrs["IPAM"]["Config"][0]
    if "Gateway" in config:
        return str(config["Gateway"])
    return str(
        next(ipaddress.ip_network(config["Subnet"]).hosts())
    )  # docker0 takes the subnet's first address


def _connect_probe(targets: dict[str, tuple[str, int]]) -> str:
    lines = [PROBE, "import socket"]
    for name, (host, port) in targets.items():
        lines.append(
            f"attempt({name!r}, lambda: socket.create_connection(({host!r}, {port}), timeout=1.5).close())"
        )
    return "\n".join(lines)


def test_no_network_by_default(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    host_listener = _Listener("0.0.0.0")
    try:
        targets = {
            "host_port": (_docker0_gateway(), host_listener.port),
            "local_port": ("127.0.0.1", host_listener.port),
            "public_address": ("1.1.1.1", 443),
        }
        result = run(sandbox, run_dir, labels, _connect_probe(targets))
    finally:
        host_listener.close()
    assert outcomes(result) == dict.fromkeys(targets, "BLOCKED"), result.log_tail
    assert host_listener.accepted == 0


class _GraderStandIn(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 - http.server's naming
        body = b'{"status": "ready"}'
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_grader_network_reaches_only_the_grader(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    grader = socketserver.ThreadingTCPServer(("127.0.0.1", 0), _GraderStandIn)
    threading.Thread(target=grader.serve_forever, daemon=True).start()
    other = _Listener("0.0.0.0")
    try:
        grader_url = f"http://127.0.0.1:{grader.server_address[1]}"
        code = (
            _connect_probe(
                {
                    "docker0_host_port": (_docker0_gateway(), other.port),
                    "local_port": ("127.0.0.1", other.port),
                    "public_address": ("1.1.1.1", 443),
                }
            )
            + """
import os, urllib.parse, urllib.request
url = os.environ["RLLOOP_GRADER_URL"]
gw = urllib.parse.urlsplit(url).hostname
attempt("gateway_other_port", lambda: socket.create_connection((gw, PORT), timeout=1.5).close())
attempt("grader_health", lambda: print(urllib.request.urlopen(url + "/health", timeout=5).read().decode()))
import time
started = time.monotonic()
attempt("name_lookup", lambda: socket.getaddrinfo("api.anthropic.com", 443))
print("LOOKUP_S", round(time.monotonic() - started, 2))
""".replace("PORT", str(other.port))
        )
        result = run(sandbox, run_dir, labels, code, network="grader", grader_url=grader_url)
    finally:
        grader.shutdown()
        grader.server_close()
        other.close()
    assert outcomes(result) == {
        "docker0_host_port": "BLOCKED",
        "local_port": "BLOCKED",
        "public_address": "BLOCKED",
        "gateway_other_port": "BLOCKED",
        "grader_health": "ALLOWED",
        "name_lookup": "BLOCKED",
    }, result.log_path.read_text()
    assert '"status": "ready"' in result.log_tail
    # a name fails at once (an agent's update check or telemetry must not hang): Docker's resolver took 10 s
    (lookup_s,) = [
        float(line.split()[1]) for line in result.log_tail.splitlines() if line.startswith("LOOKUP_S")
    ]
    assert lookup_s < 2.0
    assert other.accepted == 0


def test_fork_bomb_hits_the_pids_limit(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    code = """
import os, time
children = 0
try:
    for _ in range(2000):
        if os.fork() == 0:
            time.sleep(60)
            os._exit(0)
        children += 1
    print("FORKED ALL", children)
except OSError as exc:
    print("FORK BLOCKED after", children, type(exc).__name__, flush=True)
os._exit(0)
"""
    result = run(sandbox, run_dir, labels, code, max_processes=64, timeout_s=60)
    assert "FORK BLOCKED" in result.log_tail, result.log_tail
    forked = int(result.log_tail.split("FORK BLOCKED after")[1].split()[0])
    assert forked < 64


def test_memory_limit_is_reported_as_oom(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    code = "b = []\nwhile True: b.append(bytearray(16 * 2**20))"
    result = run(sandbox, run_dir, labels, code, memory_mb=128, timeout_s=60)
    assert result.oom_killed and not result.ok
    assert "out of memory" in result.reason()


def _host_pids_with(needle: str) -> list[int]:
    found = []
    for entry in os.scandir("/proc"):
        if entry.name.isdigit():
            try:
                with open(f"/proc/{entry.name}/cmdline", "rb") as f:
                    if needle.encode() in f.read():
                        found.append(int(entry.name))
            except OSError:
                pass
    return found


def test_timeout_kills_everything_including_double_forked_child(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    marker = str(31000 + uuid.uuid4().int % 1000)
    code = f"""
import os, subprocess, time
if os.fork() == 0:
    os.setsid()
    if os.fork() == 0:
        os.execvp("sleep", ["sleep", "{marker}"])
    os._exit(0)
print("daemon started", flush=True)
time.sleep(300)
"""
    result = run(sandbox, run_dir, labels, code, timeout_s=3)
    assert result.timed_out and result.exit_code is None
    assert "daemon started" in result.log_path.read_text()
    assert _host_pids_with(f"sleep\0{marker}") == []


def test_filling_the_disk_is_stopped(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    code = "import itertools\nfor i in itertools.count():\n    open(f'part{i}', 'wb').write(b'0' * 2**20)"
    result = run(sandbox, run_dir, labels, code, max_output_mb=20, timeout_s=60)
    assert result.output_limit_exceeded and "max_output_mb" in result.reason()
    # and one big file cannot pass the per-file cap at all
    code = "f = open('big', 'wb')\nwhile True: f.write(b'0' * 2**20); f.flush()"
    result = run(sandbox, run_dir, labels, code, max_output_mb=20, timeout_s=60)
    assert not result.ok and "File too large" in result.log_tail
    assert (run_dir / "workspace" / "big").stat().st_size <= 20 * 2**20


def test_gigabytes_of_logs_are_capped(sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]) -> None:
    ws = run_dir / "workspace"
    request = SandboxRequest(
        command=["sh", "-c", "yes 0123456789abcdef0123456789abcdef | head -c 1000000000; echo; echo THE-END"],
        workspace=ws,
        log_path=run_dir / "trial.log",
        labels=labels,
        max_log_bytes=1_000_000,
        timeout_s=300,
    )
    result = sandbox.run(request)
    assert result.ok, result.log_tail
    assert (run_dir / "trial.log").stat().st_size < 1_100_000
    assert "log truncated" in (run_dir / "trial.log").read_text()
    assert result.log_tail.splitlines()[-1] == "THE-END"


def test_cleanup_removes_leftover_containers(sandbox: DockerSandbox, labels: dict[str, str]) -> None:
    sandbox.client.containers.create(IMAGE, command=["true"], labels={"rlloop.managed": "true", **labels})
    assert sandbox.cleanup(labels) == 1


def test_exit_code_and_output_come_through_the_watchdog(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    code = "import sys; print('said', sys.stdin.read() == ''); sys.exit(7)"
    result = run(sandbox, run_dir, labels, code)
    assert result.exit_code == 7 and not result.ok
    assert "said True" in result.log_tail  # the command reads an empty stdin, not the watchdog's lifeline


def test_stop_reaches_the_command_through_the_watchdog(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    code = """
import signal, sys, time
def bye(*_):
    print("got SIGTERM", flush=True)
    sys.exit(0)
signal.signal(signal.SIGTERM, bye)
print("ready", flush=True)
time.sleep(300)
"""
    result = run(sandbox, run_dir, labels, code, timeout_s=3)
    assert result.timed_out
    assert "got SIGTERM" in result.log_path.read_text()  # graceful stop: the watchdog passed the signal on


# A run-like parent: starts one trial (the command in argv[4], `sleep 600` by default) in a DockerSandbox and waits.
PARENT = """
import sys
from pathlib import Path
from sandbox.backends.docker import DockerSandbox
from sandbox.base import SandboxRequest
ws, image, run_id = Path(sys.argv[1]), sys.argv[2], sys.argv[3]
command = sys.argv[4:] or ["sleep", "600"]
DockerSandbox(image=image).run(SandboxRequest(
    command=command, workspace=ws, log_path=ws.parent / "trial.log", timeout_s=900,
    labels={"rlloop.run": run_id, "rlloop.trial": "t1"},
))
"""

# A hostile trial: it kills, with SIGKILL, every process of the container it can signal but its own line (itself and
# its ancestors: killing the watchdog's main shell would end the container, and the trial with it), which takes the
# in-container watchdog (its stdin watcher and `cat`); it reports what it killed, then runs on. `kill -9 -1` signals
# the same processes and its own ancestors too: this is that attack, less the part that would end the trial itself.
HOSTILE = """
import os, signal, time
def stat(pid):
    return open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
line, pid = set(), os.getpid()
while pid > 0:
    line.add(pid)
    pid = int(stat(pid)[1])
killed = set()
for _ in range(3):
    for name in os.listdir("/proc"):
        if name.isdigit() and int(name) not in line and int(name) != 1:
            try:
                what = open(f"/proc/{name}/cmdline", "rb").read().replace(b"\\0", b" ").decode()
                os.kill(int(name), signal.SIGKILL)
                killed.add(what.strip() or "?")
            except OSError:
                pass
    time.sleep(0.2)
print("KILLED", sorted(killed), flush=True)
open("attacked", "w").write("\\n".join(sorted(killed)))
time.sleep(600)
"""


def _children(pid: int) -> list[int]:
    from tasks import procfs

    return [child for child, p in procfs.table().items() if p.ppid == pid and not p.gone]


def _start_parent(run_dir: Path, labels: dict[str, str], *command: str) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [sys.executable, "-c", PARENT, str(run_dir / "workspace"), IMAGE, labels["rlloop.run"], *command],
        cwd=Path(__file__).resolve().parents[2],
    )


def _wait_running(
    sandbox: DockerSandbox, filters: dict[str, list[str]], parent: subprocess.Popen[bytes]
) -> None:
    deadline = time.monotonic() + 60
    while not sandbox.client.containers.list(filters=filters) and time.monotonic() < deadline:
        assert parent.poll() is None, "the parent exited before its trial started"
        time.sleep(0.2)
    assert sandbox.client.containers.list(filters=filters), "the trial container never started"


def test_a_trial_that_kills_all_it_can_still_dies_with_its_run(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    """The lifeline is out of the trial's reach: with the in-container watchdog killed by the trial, a SIGKILL of
    the process that started it still leaves no container running after a few seconds, with no rlloop command run in
    between (the keeper on the host killed it); the next cleanup removes the exited container and names it."""
    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    parent = _start_parent(run_dir, labels, "python3", "-c", HOSTILE)
    try:
        _wait_running(sandbox, filters, parent)
        attacked = run_dir / "workspace" / "attacked"
        deadline = time.monotonic() + 60
        while not attacked.exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        killed = attacked.read_text().splitlines()
        assert any("rlloop-watchdog" in what for what in killed), killed  # the stdin watcher went ...
        assert any(what.startswith("cat") for what in killed), killed  # ... and the `cat` it waited on
        assert sandbox.client.containers.list(filters=filters), "the attack ended its own container"
        parent.kill()
        parent.wait(timeout=10)
        killed_at = time.monotonic()
        while sandbox.client.containers.list(filters=filters) and time.monotonic() - killed_at < 5:
            time.sleep(0.2)
        assert not sandbox.client.containers.list(filters=filters), "the trial outlived its run by 5 s"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    report = sandbox.cleanup(labels)
    assert report == 1 and report.what == ("trial container of t1 (exited)",)


def test_the_watchdog_stops_the_container_when_its_run_and_keeper_are_killed_9(
    sandbox: DockerSandbox, run_dir: Path, labels: dict[str, str]
) -> None:
    """The second line: a SIGKILL of the run and of its keeper alike (a whole process tree killed) still stops a
    trial that left its watchdog alone; the container stays, exited, for the next cleanup to remove and name."""
    from tasks import procfs

    filters = {"label": [f"{k}={v}" for k, v in labels.items()]}
    parent = _start_parent(run_dir, labels)
    try:
        _wait_running(sandbox, filters, parent)
        (keeper,) = [
            pid
            for pid in _children(parent.pid)
            if b"sandbox.container_keeper" in (procfs.cmdline(pid) or b"")
        ]
        time.sleep(1.0)  # the watchdog is up
        os.kill(keeper, signal.SIGKILL)
        parent.kill()
        parent.wait(timeout=10)
        killed = time.monotonic()
        while sandbox.client.containers.list(filters=filters) and time.monotonic() - killed < 5:
            time.sleep(0.2)
        assert not sandbox.client.containers.list(filters=filters), "the trial outlived its run by 5 s"
    finally:
        if parent.poll() is None:
            parent.kill()
            parent.wait()
    # exited but not removed (its run and keeper could not): the next cleanup removes it and says what it was
    report = sandbox.cleanup(labels)
    assert report == 1
    assert report.what == ("trial container of t1 (exited)",)
