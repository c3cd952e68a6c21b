"""Run a trial as a local process tree, isolated by namespaces where this machine can make them.

Isolated (the default wherever bubblewrap works; see `sandbox.namespaces`): the trial has its own mount, PID,
network, IPC and UTS namespaces, sees only the system and Python read-only, its workspace read-write and the
request's mounts read-only, each at its target (/workspace, /model, /output...: no host path inside), a private /tmp and a loopback of its own (with `network="grader"`, a relay to the grading server and
nothing else), runs as a non-root uid with no capabilities, cannot signal anything outside its own tree, and dies
with the process that started it, even when that one is killed with SIGKILL.

Unisolated (`isolate=False`, or no namespaces on this machine): NOT a security boundary. The command runs as this
user and sees the host's files and network. A run that trains this way is marked `isolation=none` everywhere.

Both ways: the command starts in its own session with only PATH, HOME (/tmp isolated, else the workspace), LANG,
PYTHONUNBUFFERED=1, this process's PYTHONPATH folders (after the request's own), LD_LIBRARY_PATH for a GPU trial, and
`request.env` in its environment (no API keys from the parent); cwd is the workspace; memory, process count and
CPU share are capped by a cgroup where one can be made (else RLIMIT_AS for memory, except for a GPU trial: CUDA
reserves address space far beyond what it uses, so that trial gets no memory limit and its log says so); RLIMIT_CPU caps CPU-seconds,
RLIMIT_FSIZE the size of any one file, and the growth of the workspace is watched for `max_output_mb`; the log is
streamed with a byte cap; at the wall-clock limit every process of the run, including double-forked ones that left
the group, gets SIGTERM, a grace period, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
from pathlib import Path
from urllib.parse import urlsplit

from sandbox import namespaces, reaper, supervise
from sandbox.base import (
    CleanupReport,
    Mount,
    SandboxBase,
    SandboxRequest,
    SandboxResult,
    SandboxUnavailableError,
)
from sandbox.devices import DEVICE_ORDER
from sandbox.jail import Jail
from sandbox.logstream import CappedLog, pump
from sandbox.relay import UnixRelay
from tasks import procfs
from tasks.lifetime import die_with_parent

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
RLIMITS = {"cpu": resource.RLIMIT_CPU, "fsize": resource.RLIMIT_FSIZE}  # supervise.rlimits' names
GPU_WITHOUT_MEMORY_LIMIT = (
    "no memory limit for this GPU trial (memory_mb={memory_mb} not enforced): no cgroup can be made here, and "
    "RLIMIT_AS, the fallback, caps address space, which CUDA reserves far beyond what it uses; run as root or "
    "with a delegated cgroup, or use --sandbox docker, to have it enforced"
)
GATE_DIR = Path("/run/rlloop-gate")  # where an isolated trial sees the socket folder of its way to the grader
LABELS_ENV = (
    "RLLOOP_SANDBOX_LABELS"  # on the sandbox's outermost process: how cleanup() of another process finds it
)


def scrubbed_env(
    request: SandboxRequest, marker: tuple[str, str] | None = None, *, maps: bool = False
) -> dict[str, str]:
    """The whole environment of the command: a minimal base, then `request.env` on top."""
    env = {
        "PATH": os.environ.get("PATH", DEFAULT_PATH),
        # isolated: a private /tmp, so caches never land in the checkpoint folder; unisolated: the workspace
        "HOME": "/tmp" if maps else str(request.workspace),
        "LANG": os.environ.get("LANG", "C.UTF-8"),
        "PYTHONUNBUFFERED": "1",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in request.gpus),
        **(DEVICE_ORDER if request.gpus else {}),
    }
    if request.grader_url:
        env["RLLOOP_GRADER_URL"] = request.grader_url
    env.update(request.env)
    pythonpath = namespaces.trial_pythonpath(request.env.get("PYTHONPATH"))
    if pythonpath:
        env["PYTHONPATH"] = pythonpath
    if request.gpus and os.environ.get("LD_LIBRARY_PATH"):
        env.setdefault("LD_LIBRARY_PATH", os.environ["LD_LIBRARY_PATH"])  # where CUDA images keep libcuda
    if marker is not None:
        env[marker[0]] = marker[1]
    return env


def _set_limits(request: SandboxRequest, memory_by_rlimit: bool) -> None:
    """rlimits for the child (runs between fork and exec)."""
    for name, limit in supervise.rlimits(request).items():
        resource.setrlimit(RLIMITS[name], limit)
    if memory_by_rlimit and request.memory_mb is not None:
        size = request.memory_mb * supervise.MB
        resource.setrlimit(resource.RLIMIT_AS, (size, size))
    # RLIMIT_NPROC counts every process of the user and root ignores it: only meaningful for other users.
    if request.max_processes is not None and os.geteuid() != 0:
        resource.setrlimit(resource.RLIMIT_NPROC, (request.max_processes, request.max_processes))


def _exited(proc: subprocess.Popen[bytes], timeout: float) -> bool:
    """Wait up to `timeout` seconds for the command's leader; whether it has exited."""
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        return False
    return True


class LocalSandbox(SandboxBase):
    """Runs each command as a local process tree (see the module docstring for what it does and does not stop)."""

    name = "local"
    python = sys.executable  # trials run with this interpreter (its environment is mounted read-only)

    def __init__(
        self,
        grace_s: float = 5.0,
        use_cgroup: bool | None = None,
        output_poll_s: float = 2.0,
        isolate: bool | None = None,
    ) -> None:
        """`isolate`: True requires namespaces (SandboxUnavailableError, with the reason, where there are none),
        False never uses them, None uses them wherever this machine can."""
        self.grace_s = grace_s
        self.use_cgroup = use_cgroup  # None: use a cgroup when one can be made here
        self.output_poll_s = output_poll_s
        probe = (
            namespaces.probe()
            if isolate is not False
            else namespaces.Isolation(level="none", reason="isolate=False")
        )
        if isolate and not probe.isolated:
            raise SandboxUnavailableError(f"the local sandbox cannot isolate trials here: {probe.reason}")
        self.bwrap = probe.bwrap if probe.isolated else None
        self.maps_paths = (
            self.bwrap is not None
        )  # bubblewrap binds each folder at its target; unisolated cannot
        self.isolation = probe.level
        self.isolation_reason = probe.reason
        self._runs: dict[str, tuple[dict[str, str], Jail]] = {}
        self._lock = threading.Lock()

    def run(self, request: SandboxRequest) -> SandboxResult:
        return supervise.run_leased(request, self._run)

    def _run(self, request: SandboxRequest) -> SandboxResult:
        jail = Jail(self.use_cgroup, request.memory_mb, request.max_processes, request.cpus)
        memory_by_rlimit = not jail.uses_cgroup and not request.gpus  # RLIMIT_AS breaks CUDA's address space
        log = CappedLog(request.log_path, request.max_log_bytes)
        if request.gpus and request.memory_mb is not None and not jail.uses_cgroup:
            log.note(GPU_WITHOUT_MEMORY_LIMIT.format(memory_mb=request.memory_mb))
        sup = supervise.Supervisor(request, log, self.output_poll_s)

        die_with_us = die_with_parent(signal.SIGKILL)  # the unisolated leader at least goes with this process

        def child_setup() -> None:
            die_with_us()
            jail.enter()
            _set_limits(request, memory_by_rlimit)

        env = scrubbed_env(request, jail.marker, maps=self.maps_paths)
        gate: UnixRelay | None = None
        try:
            argv, gate = self._argv(request, env)
            env[LABELS_ENV] = _labels_value(request.labels)
            proc = subprocess.Popen(
                argv,
                cwd=request.cwd(False),  # bubblewrap then enters the working directory as the trial sees it
                env=env,
                stdin=subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=child_setup,
                close_fds=True,
            )
        except OSError as exc:
            log.note(f"could not start {request.command[0]!r}: {exc}")
            jail.close()
            _close_gate(gate)
            sup.finish(oom_killed=False)
            return sup.result(127, self.name)
        jail.leader = proc.pid
        with self._lock:
            self._runs[jail.id] = (request.labels, jail)
        reaper.register(jail.id, sup.stopper(lambda: jail.signal(signal.SIGKILL)))
        assert proc.stdout is not None
        reader = threading.Thread(target=pump, args=(proc.stdout, log), daemon=True)
        reader.start()
        try:
            sup.watch(lambda timeout: _exited(proc, timeout), stopping="every process of the run")
            if proc.poll() is None:
                jail.terminate(0.0 if sup.interrupted.is_set() else self.grace_s)
            else:
                jail.kill()  # the leader is done: whatever it left running in the background goes too
            proc.wait()
        except BaseException:  # KeyboardInterrupt, SystemExit: nothing may outlive the caller
            jail.kill()
            proc.wait()
            raise
        finally:
            reader.join(timeout=10)
            reaper.unregister(jail.id)
            with self._lock:
                self._runs.pop(jail.id, None)
            oom = jail.oom_kills() > 0
            jail.close()
            _close_gate(gate)
            # bubblewrap reports its command's death by signal as 128 + the signal, as a shell does
            if proc.returncode in (-signal.SIGXCPU, 128 + signal.SIGXCPU):
                log.note(f"CPU-time limit of {request.cpu_time_s}s (cpu_time_s) reached")
            sup.finish(oom)
        rc = proc.returncode
        if rc is not None and rc < 0:
            rc = 128 - rc  # killed by a signal, as a shell reports it
        return sup.result(rc, self.name)

    def _argv(self, request: SandboxRequest, env: dict[str, str]) -> tuple[list[str], UnixRelay | None]:
        """The command as started (under bubblewrap when isolated) and its gate to the grader, if it has one. A
        program that is nowhere on PATH is refused here, so both ways report it alike (127, "could not start")."""
        program = request.command[0]
        if shutil.which(program, path=env.get("PATH")) is None and not os.path.isfile(program):
            raise FileNotFoundError(f"no such program: {program}")
        if self.bwrap is None:
            return list(request.command), None
        namespaces.hand_to_sandbox_user(request.workspace)
        inner: list[str] = list(request.command)
        extra: tuple[str, ...] = ()
        gate = None
        if request.network == "grader":
            gate = _open_gate(request)
            seen = Mount(source=gate.path.parent, target=GATE_DIR)
            request = request.model_copy(update={"mounts": [*request.mounts, seen]})
            host, port = _host_port(request.grader_url or "")
            socket_inside = str(GATE_DIR / gate.path.name)
            inner, extra = (
                [sys.executable, "-m", "sandbox.gate", socket_inside, host, str(port), "--", *inner],
                ("sandbox",),
            )
        argv = namespaces.bwrap_argv(
            request, self.bwrap, inner=inner, extra_packages=extra, hide_env=(LABELS_ENV,)
        )
        return argv, gate

    def cleanup(self, labels: dict[str, str] | None = None) -> CleanupReport:
        """Stop the runs of this sandbox whose labels include `labels` (all of them when None): the live ones of
        this process, and those another process left behind (found by the labels on their outermost process;
        a dead run's trial, for instance). Returns what was stopped ("trial process of t03")."""
        with self._lock:
            runs = list(self._runs.values())
        stopped: list[str] = []
        mine: set[int] = set()
        for run_labels, jail in runs:
            if jail.leader is not None:
                mine.add(jail.leader)
            if supervise.labels_match(run_labels, labels):
                jail.signal(signal.SIGKILL)
                stopped.append(f"trial process of {run_labels.get('rlloop.trial', '?')}")
        for pid, run_labels in _labelled_processes().items():
            if pid not in mine and supervise.labels_match(run_labels, labels):
                with contextlib.suppress(OSError):
                    os.killpg(pid, signal.SIGKILL)
                with contextlib.suppress(OSError):
                    os.kill(pid, signal.SIGKILL)
                stopped.append(f"trial process of {run_labels.get('rlloop.trial', '?')} (pid {pid})")
        return CleanupReport(stopped)


def _open_gate(request: SandboxRequest) -> UnixRelay:
    """The host's end of an isolated trial's only way out: a socket file that reaches the grading server."""
    folder = Path(tempfile.mkdtemp(prefix="rlloop-gate-"))
    folder.chmod(0o755)
    return UnixRelay(folder / "grader.sock", _host_port(request.grader_url or ""))


def _close_gate(gate: UnixRelay | None) -> None:
    if gate is not None:
        gate.close()
        shutil.rmtree(gate.path.parent, ignore_errors=True)


def _host_port(url: str) -> tuple[str, int]:
    parts = urlsplit(url)
    if not parts.hostname or not parts.port:
        raise ValueError(f"network='grader' needs grader_url as http://host:port, got {url!r}")
    return parts.hostname, parts.port


def _labels_value(labels: dict[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items())) or "-"


def _labelled_processes() -> dict[int, dict[str, str]]:
    """Leaders of local sandbox runs on this machine (any process), with their labels. A leader is the process
    that carries the labels but whose parent does not: under bubblewrap, the outer bwrap, whose death ends the
    namespace; unisolated, the command's session leader. A trial cannot rewrite its bubblewrap's environment."""
    found: dict[int, tuple[int, dict[str, str]]] = {}
    for pid, raw in procfs.with_env(LABELS_ENV).items():
        ppid = procfs.parent_of(pid)
        if ppid is not None:
            found[pid] = (ppid, dict(p.split("=", 1) for p in raw.split(",") if "=" in p))
    return {pid: labels for pid, (ppid, labels) in found.items() if ppid not in found}
