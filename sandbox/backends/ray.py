"""Run each trial as a Ray task on whichever node has room, inside that node's Docker (or local) sandbox.

The task asks Ray for the request's resources (num_cpus = request.cpus or 1, num_gpus = len(request.gpus), memory =
request.memory_mb), so two trials, or a trial and anything else scheduled through Ray, never share a GPU by
accident: the task hands the trial the GPU ids Ray assigned, not the ones requested. The trial's log is written to
`request.log_path`, which (like the workspace the checkpoint lands in) must be on storage the nodes share.

A worker that dies mid-trial (killed, OOM-killed by Ray, node lost) ends as a failed trial with `worker_lost=True`,
or is retried when `max_retries` > 0. Nothing outlives it: the task starts a watchdog process
(`python -m sandbox.backends.ray --watch PID MARKER`) that, once the worker is gone, kills every process carrying
the trial's marker variable and removes its containers. A driver that is killed takes its tasks with it (Ray ends a
dead driver's workers), and `cleanup(labels)` also asks every node's own sandbox to end what carries the labels, so
a resumed run ends what an earlier driver left on nodes it cannot see.

Each result says where the trial ran (`node`: Ray node id, IP, hostname) and which GPU ids Ray assigned on that
node (`gpus`). Before the first trial, `check_shared_storage(folder)` makes every node that may run trials prove it
sees the run's folder (a probe written by the driver and read back on the node, and the reverse); a node that does
not stops the run with `StorageNotSharedError`, naming the node and what to mount.
"""

from __future__ import annotations

import contextlib
import os
import secrets
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from pathlib import Path
from typing import Any

from sandbox import namespaces, supervise, untrusted
from sandbox.base import CleanupReport, SandboxBase, SandboxRequest, SandboxResult, SandboxUnavailableError
from sandbox.registry import SANDBOXES, resolve_auto
from tasks import procfs

MARKER_ENV = "RLLOOP_RAY_TRIAL"
MARKER_LABEL = "rlloop.ray_trial"
PROBE_DIR = ".ray-storage-probe"  # in the run's (host-owned) folder, never in a trial's
PROBE_TIMEOUT_S = 120.0


class StorageNotSharedError(SandboxUnavailableError):
    """A Ray node that may run trials does not see the run's folder as the driver does."""


def node_here() -> dict[str, str]:
    """This Ray worker's node: its id, IP and hostname (what a trial record, the run log and MLflow carry)."""
    import ray

    return {
        "node_id": ray.get_runtime_context().get_node_id(),
        "node_ip": ray.util.get_node_ip_address(),
        "hostname": socket.gethostname(),
    }


def trial_nodes(ray: Any) -> list[dict[str, Any]]:
    """The live nodes that may run a trial (some CPU to give it; a head started with --num-cpus 0 runs none)."""
    return [n for n in ray.nodes() if n.get("Alive") and float(n.get("Resources", {}).get("CPU", 0)) > 0]


class RaySandboxResult(SandboxResult):
    """A SandboxResult that can also say the Ray worker running the trial was lost."""

    worker_lost: bool = False

    def reason(self) -> str:
        if self.worker_lost:
            return "the Ray worker running the trial died (killed, out of memory or node lost)"
        return super().reason()


class RaySandbox(SandboxBase):
    """Trials as Ray tasks (see the module docstring)."""

    name = "ray"
    schedules_resources = True  # Ray places each trial on a node with room for its CPUs and GPUs
    places_on_nodes = True

    def __init__(
        self,
        address: str | None = None,
        inner: str = "auto",
        max_retries: int = 0,
        init_kwargs: dict[str, Any] | None = None,
    ) -> None:
        if inner not in ("auto", "docker", "local"):
            raise ValueError(f"unknown inner sandbox {inner!r}: use auto, docker or local")
        self.address = address or os.environ.get("RAY_ADDRESS")
        self.inner = inner if inner != "auto" else resolve_auto().name
        # as the driver's machine can do it; a Ray node runs its trials in its own local or docker sandbox
        if self.inner == "docker":
            self.isolation, self.isolation_reason = "container", "each trial in a container on its node"
        else:
            probe = namespaces.probe()
            self.isolation, self.isolation_reason = probe.level, probe.reason
        # trials see their folders at fixed targets as the inner sandbox on the node shows them
        self.maps_paths = self.inner == "docker" or self.isolation == "namespaces"
        self.python = sys.executable if self.inner == "local" else "python"  # the interpreter trials run with
        self.max_retries = max_retries
        self.init_kwargs = init_kwargs or {}
        self._live: dict[str, tuple[dict[str, str], Any]] = {}
        self._lock = threading.Lock()

    def _ray(self) -> Any:
        import ray

        if not ray.is_initialized():
            ray.init(address=self.address, log_to_driver=False, **self.init_kwargs)
        return ray

    def run(self, request: SandboxRequest) -> SandboxResult:
        ray = self._ray()
        marker = uuid.uuid4().hex
        request = request.model_copy(
            update={
                "env": {**request.env, MARKER_ENV: marker},
                "labels": {**request.labels, MARKER_LABEL: marker},
            }
        )
        options: dict[str, Any] = {
            "num_cpus": request.cpus or 1.0,
            "num_gpus": len(request.gpus),
            "max_retries": self.max_retries,
            "retry_exceptions": False,
        }
        if request.memory_mb:
            options["memory"] = request.memory_mb * supervise.MB
        started = time.monotonic()
        ref = ray.remote(_trial_task).options(**options).remote(request.model_dump_json(), self.inner)
        with self._lock:
            self._live[marker] = (request.labels, ref)
        try:
            data = ray.get(ref)
        except KeyboardInterrupt:
            with contextlib.suppress(Exception):
                ray.cancel(ref, force=True)
            raise
        except ray.exceptions.RayError as exc:
            return _lost(request, exc, time.monotonic() - started)
        finally:
            with self._lock:
                self._live.pop(marker, None)
        return RaySandboxResult.model_validate(data)

    def cleanup(self, labels: dict[str, str] | None = None) -> CleanupReport:
        """Cancel (force: the worker is killed, its watchdog kills the trial) the live trials carrying `labels`;
        with `labels`, also end on every trial node what its own sandbox finds carrying them (what a killed
        driver left there). Returns what was stopped."""
        with self._lock:
            live = list(self._live.values())
        stopped: list[str] = []
        for run_labels, ref in live:
            if supervise.labels_match(run_labels, labels):
                with contextlib.suppress(Exception):
                    import ray

                    ray.cancel(ref, force=True)
                    stopped.append(f"ray trial task of {run_labels.get('rlloop.trial', '?')}")
        if labels and (live or self._connected()):
            stopped += self._cleanup_nodes(labels)
        return CleanupReport(stopped)

    def _connected(self) -> bool:
        """Whether a cluster is there to clean (connecting to it when an address is known; without one, a new
        local instance would hold nothing of ours)."""
        import ray

        if ray.is_initialized():
            return True
        if not self.address:
            return False
        try:
            self._ray()
        except Exception:  # noqa: BLE001 - no cluster: nothing of ours can be running on one
            return False
        return True

    def _cleanup_nodes(self, labels: dict[str, str]) -> list[str]:
        import ray
        from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

        refs: list[Any] = []
        for node in trial_nodes(ray):
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            task = ray.remote(_cleanup_task).options(num_cpus=0, scheduling_strategy=strategy)
            refs.append(task.remote(labels, self.inner))
        ended: list[str] = []
        deadline = time.monotonic() + PROBE_TIMEOUT_S
        # one node that cannot answer (lost since it was listed) does not hide the others' answers
        for ref in refs:
            with contextlib.suppress(Exception):
                found: list[str] = ray.get(ref, timeout=max(1.0, deadline - time.monotonic()))
                ended += found
        return ended

    def check_shared_storage(self, folder: Path, shared: Path | None = None) -> list[dict[str, str]]:
        """Make every node that may run trials prove it sees `folder` (the run's folder) as the driver does:
        the driver writes a probe there and each node reads it back, then each node writes one the driver reads.
        Returns the nodes checked; raises StorageNotSharedError naming each node that does not see it."""
        return check_shared_storage(self._ray(), folder, shared)


def _lost(request: SandboxRequest, exc: Exception, duration_s: float) -> RaySandboxResult:
    first = str(exc).strip().splitlines()[0][:300] if str(exc).strip() else ""
    note = f"\n[rlloop] the Ray worker running this trial died: {type(exc).__name__}: {first}\n"
    tail = ""
    with contextlib.suppress(OSError):
        request.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(request.log_path, "ab") as handle:
            handle.write(note.encode())
        with open(request.log_path, "rb") as handle:  # the host's own log (never in the trial's folder)
            handle.seek(max(0, os.fstat(handle.fileno()).st_size - 4000))
            tail = handle.read().decode(errors="replace")
    return RaySandboxResult(
        exit_code=None,
        log_path=request.log_path,
        duration_s=duration_s,
        log_tail=tail or note,
        backend="ray",
        worker_lost=True,
    )


def _trial_task(request_json: str, inner: str) -> dict[str, Any]:
    """The Ray task: run the trial in this node's inner sandbox, guarded by a watchdog."""
    import ray

    request = SandboxRequest.model_validate_json(request_json)
    if request.gpus:  # the devices Ray gave this task, never the ones asked for by index
        request.gpus = [int(g) for g in ray.get_gpu_ids()]
    marker = request.env[MARKER_ENV]
    watchdog = subprocess.Popen(
        [sys.executable, "-m", "sandbox.backends.ray", "--watch", str(os.getpid()), marker],
        start_new_session=True,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        # the backend's own defaults (local: namespaces wherever this node can), as a trial on this node would get
        result = SANDBOXES.get(inner)().run(request)
    finally:
        watchdog.terminate()
        with contextlib.suppress(subprocess.TimeoutExpired):
            watchdog.wait(timeout=5)
    data = result.model_dump(mode="json")
    data["backend"] = f"ray/{result.backend}"
    data["node"] = node_here()
    data["gpus"] = list(request.gpus)
    return data


def _cleanup_task(labels: dict[str, str], inner: str) -> list[str]:
    """On one node: end what its own sandbox finds carrying `labels` (left by a driver that died)."""
    where = socket.gethostname()
    found = SANDBOXES.get(inner)().cleanup(labels)
    what = list(getattr(found, "what", ())) or ["trial process"] * int(found)
    return [f"{item} on node {where}" for item in what]


def _write_new(folder: Path, name: str, text: str) -> None:
    """Create folder/name (which must not exist) and write `text`, following no link."""
    dir_fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    try:
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644, dir_fd=dir_fd)
        with os.fdopen(fd, "w") as handle:
            handle.write(text)
    finally:
        os.close(dir_fd)


def _probe_task(folder: str, name: str, expected: str) -> dict[str, str]:
    """On one node: read the driver's probe in `folder`, then write this node's own; say what it saw."""
    info = {**node_here(), "seen": "", "reply": "", "problem": ""}
    probe = Path(folder)
    try:
        seen = untrusted.read_text(probe, name, max_bytes=4096)
    except FileNotFoundError:
        info["problem"] = f"{probe / name} does not exist on this node"
        return info
    except OSError as exc:
        info["problem"] = f"{probe / name} cannot be read on this node: {exc}"
        return info
    if seen != expected:
        info["problem"] = (
            f"{probe / name} holds something else on this node (another folder at the same path)"
        )
        return info
    info["seen"] = "yes"
    reply = secrets.token_hex(16)
    try:
        _write_new(probe, f"{name}.{info['node_id']}", reply)
    except OSError as exc:
        info["problem"] = f"cannot write into {probe} on this node: {exc}"
        return info
    info["reply"] = reply
    return info


def check_shared_storage(ray: Any, folder: Path, shared: Path | None = None) -> list[dict[str, str]]:
    """See RaySandbox.check_shared_storage; `rlloop bench --executor ray` runs it on the sweep's folder. `shared`
    (default: `folder`) is what the error tells the user to mount (RLLOOP_HOME)."""
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    folder = Path(folder).resolve()
    shared = Path(shared).resolve() if shared is not None else folder
    nodes = trial_nodes(ray)
    if not nodes:
        raise StorageNotSharedError(
            "the Ray cluster has no live node with CPUs to run trials on: add worker nodes "
            "(`ray start --address HEAD:6379` on each)"
        )
    folder.mkdir(parents=True, exist_ok=True)
    probe = untrusted.host_dir(folder / PROBE_DIR, anchor=folder)
    name = f"probe-{secrets.token_hex(8)}"
    expected = f"rlloop storage probe {secrets.token_hex(16)}"
    _write_new(probe, name, expected)
    try:
        refs = {}
        for node in nodes:
            strategy = NodeAffinitySchedulingStrategy(node_id=node["NodeID"], soft=False)
            task = ray.remote(_probe_task).options(num_cpus=0, scheduling_strategy=strategy, max_retries=0)
            refs[node["NodeID"]] = (node, task.remote(str(probe), name, expected))
        checked: list[dict[str, str]] = []
        problems: list[str] = []
        for node_id, (node, ref) in refs.items():
            where = (
                f"{node_id} ({node.get('NodeManagerHostname', '?')}, {node.get('NodeManagerAddress', '?')})"
            )
            try:
                info = ray.get(ref, timeout=PROBE_TIMEOUT_S)
            except Exception as exc:  # noqa: BLE001 - a node that cannot answer cannot be trusted with trials
                problems.append(f"Ray node {where}: the storage probe did not answer ({type(exc).__name__})")
                continue
            if info["problem"]:
                problems.append(f"Ray node {where}: {info['problem']}")
                continue
            try:
                back = untrusted.read_text(probe, f"{name}.{node_id}", max_bytes=4096)
            except OSError:
                back = ""
            if back != info["reply"]:
                problems.append(
                    f"Ray node {where}: it wrote its probe into {probe}, but this driver does not find it there"
                )
                continue
            checked.append({k: info[k] for k in ("node_id", "node_ip", "hostname")})
        if problems:
            raise StorageNotSharedError(
                f"{len(problems)} Ray node(s) that may run trials do not see {folder} as this driver does:\n  "
                + "\n  ".join(problems)
                + f"\nMount the shared {shared} (RLLOOP_HOME) at the same path on every Ray node (NFS, a cloud "
                "filestore, a KubeRay volume), or start that node with --num-cpus 0 so it runs no trials. "
                "Nothing was trained."
            )
        return checked
    finally:
        for entry in os.listdir(probe):
            if entry.startswith(name):
                with contextlib.suppress(OSError):
                    os.unlink(probe / entry)


def _marked_pids(marker: str) -> set[int]:
    return {pid for pid, value in procfs.with_env(MARKER_ENV).items() if value == marker} - {os.getpid()}


def watch(worker_pid: int, marker: str, poll_s: float = 0.5) -> int:
    """Wait for the worker to die, then kill what its trial left. Exits quietly on SIGTERM (trial ended)."""
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    while procfs.alive(worker_pid):
        time.sleep(poll_s)
    killed = 0
    for _ in range(3):  # a second pass catches children forked while the first was killing
        pids = _marked_pids(marker)
        for pid in pids:
            with contextlib.suppress(OSError):
                os.kill(pid, signal.SIGKILL)
                killed += 1
        if not pids:
            break
        time.sleep(0.2)
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        ids = subprocess.run(
            ["docker", "ps", "-aq", "--filter", f"label={MARKER_LABEL}={marker}"],
            capture_output=True,
            text=True,
            timeout=30,
        ).stdout.split()
        if ids:
            subprocess.run(["docker", "rm", "-f", *ids], capture_output=True, timeout=60)
    return killed


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--watch":
        watch(int(sys.argv[2]), sys.argv[3])
        sys.exit(0)
    sys.exit("usage: python -m sandbox.backends.ray --watch WORKER_PID MARKER")
