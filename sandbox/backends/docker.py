"""Run each trial in its own Docker container, with the request's workspace as the only writable place.

Every folder is bound at its target (`SandboxRequest.workspace_target`, `Mount.target`: /workspace, /model,
/output...), so nothing inside names a host path; the rest is read-only. The container has no network (or, with `network="grader"`, only the grading
server), no capabilities, no new privileges, a read-only root filesystem with a small tmpfs /tmp, a non-root user,
memory without swap, a CPU share, a process cap and a per-file size cap; the workspace's growth is watched for
`max_output_mb`. Output is read straight from the container (the engine keeps no log of its own, so a command that
prints gigabytes cannot fill the host disk) into the capped log. The container is removed whatever happens.

A container never outlives the process that started it, even one killed with SIGKILL, and this does not rest on the
trial's good will: the lifeline is held on the host, out of the trial's reach. Each container is held by this
process's keeper (`sandbox.container_keeper`: a process beside this one, which no trial can signal) from its
creation to its removal; when this process dies the keeper kills it through the engine. A second line, for when the
keeper dies too (a SIGKILL of the whole process tree): the command runs under a small shell watchdog whose stdin is a
socket this process holds open for the trial's life (`StdinOnce`); when the process dies the kernel closes the
socket, the engine closes the container's stdin, and the watchdog kills every process in the container. The watchdog
runs as the trial's user, so a hostile trial can kill it; the keeper it cannot. A container left exited is removed
by the next `cleanup()` (a resumed run calls it first).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from pathlib import Path
from typing import Any

from sandbox import reaper, supervise
from sandbox.base import TRIAL_PACKAGES, CleanupReport, SandboxBase, SandboxRequest, SandboxResult
from sandbox.container_keeper import KEEPER
from sandbox.dockerlib import docker_sdk
from sandbox.grader_net import GraderNetwork, remove_leftovers
from sandbox.images import TRAINER_IMAGE
from sandbox.logstream import CappedLog
from sandbox.namespaces import SANDBOX_UID, hand_to_sandbox_user

MANAGED_LABEL = "rlloop.managed"
TMPFS_MB = 512
# The watchdog around every trial command (POSIX sh; `"$@"` is the command). It forks the stdin watcher first, so a
# process cap the command exhausts cannot stop it from starting; the command gets /dev/null as stdin. When stdin
# reaches EOF (this process died) the watcher kills every process it can see: the whole container but its init. It
# runs as the trial's user: the second line of the lifeline (the first, `sandbox.container_keeper`, is on the host).
# The engine's SIGTERM (stop) is passed on to the command, and the command's exit status comes through unchanged.
WATCHDOG = """exec 3<&0 </dev/null
{ cat <&3 >/dev/null 2>&1; kill -9 -1; } &
exec 3<&-
"$@" &
child=$!
trap 'kill -TERM "$child" 2>/dev/null' TERM
trap 'kill -HUP "$child" 2>/dev/null' HUP
while :; do
  wait "$child"
  code=$?
  kill -0 "$child" 2>/dev/null || break
done
exit "$code"
"""


def _client(timeout: int = 60) -> Any:
    docker = docker_sdk()

    return docker.from_env(timeout=timeout)


LIVE_CODE_DIR = "/opt/rlloop-live"


def live_code_mounts() -> dict[str, dict[str, str]]:
    """The host's rlloop packages, read-only, over the image's copy: trials run the trainer library the host runs,
    and code changes never need an image rebuild. Empty when rlloop is not run from a source checkout."""
    from sandbox.images import project_root

    try:
        root = project_root()
    except RuntimeError:
        return {}
    if not all((root / package / "__init__.py").is_file() for package in TRIAL_PACKAGES):
        return {}
    return {str(root / p): {"bind": f"{LIVE_CODE_DIR}/{p}", "mode": "ro"} for p in TRIAL_PACKAGES}


class DockerSandbox(SandboxBase):
    """One container per trial (see the module docstring for the limits it sets)."""

    name = "docker"
    isolation = "container"
    isolation_reason = "each trial in a container of its own"
    maps_paths = True  # every folder at its target (/workspace, /model, /output...): no host path inside
    python = "python"  # the image's interpreter

    def __init__(
        self,
        image: str = TRAINER_IMAGE,
        grace_s: float = 5.0,
        output_poll_s: float = 2.0,
        tmpfs_mb: int = TMPFS_MB,
        client: Any = None,
    ) -> None:
        self.image = image
        self.grace_s = grace_s
        self.output_poll_s = output_poll_s
        self.tmpfs_mb = tmpfs_mb
        self.client = client or _client()
        self._networks: dict[str, GraderNetwork] = {}
        self._lock = threading.Lock()
        atexit.register(self.close)

    # -- one run -------------------------------------------------------------------------------------------
    def run(self, request: SandboxRequest) -> SandboxResult:
        _check_paths(request)
        return supervise.run_leased(request, self._run)

    def _run(self, request: SandboxRequest) -> SandboxResult:
        docker = docker_sdk()

        try:
            image = self.client.images.get(self.image)
        except docker.errors.ImageNotFound as exc:
            raise RuntimeError(f"image {self.image} not found: build it with `rlloop sandbox build`") from exc
        user = self._user_for(request.workspace)
        env = {
            "HOME": "/tmp",  # a tmpfs of the container's own: caches never land in the checkpoint folder
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
            **request.env,
        }
        if live_code_mounts():  # the live checkout first, then what the request adds (plugin folders)
            env["PYTHONPATH"] = os.pathsep.join(
                p for p in (LIVE_CODE_DIR, request.env.get("PYTHONPATH")) if p
            )
        network_kw: dict[str, Any] = {"network_mode": "none"}
        mounts = self._volumes(request)
        if request.network == "grader":
            gate = self._grader_network(request.grader_url or "")
            network_kw = {"network": gate.name}
            env["RLLOOP_GRADER_URL"] = gate.url
            # a name lookup fails at once instead of waiting out Docker's resolver (sandbox.grader_net)
            mounts.append(
                docker.types.Mount(
                    target="/etc/resolv.conf", source=str(gate.resolv_conf), type="bind", read_only=True
                )
            )
        log = CappedLog(request.log_path, request.max_log_bytes)
        labels = {MANAGED_LABEL: "true", **request.labels}
        sup = supervise.Supervisor(request, log, self.output_poll_s)
        container = self.client.containers.create(
            self.image,
            command=["sh", "-c", WATCHDOG, "rlloop-watchdog", *request.command],
            # stdin stays open while attached and closes when our attachment does (the SDK sets StdinOnce only
            # with detach=False; create never attaches, so nothing else changes): the watchdog's lifeline
            stdin_open=True,
            detach=False,
            working_dir=str(request.cwd(True)),
            user=user,
            environment=env,
            labels=labels,
            mounts=mounts,
            tmpfs={"/tmp": f"rw,nosuid,nodev,size={self.tmpfs_mb}m,mode=1777"},
            read_only=True,
            cap_drop=["ALL"],
            security_opt=["no-new-privileges"],
            init=True,
            log_config=docker.types.LogConfig(type="none"),
            ulimits=_ulimits(request),
            **network_kw,
            **_limits(request),
        )
        reader: threading.Thread | None = None
        lifeline: Any = None
        try:
            KEEPER.hold(container.id)  # from here on, our death kills it (see the module docstring)
            reaper.register(container.id, sup.stopper(lambda: _kill(container)))
            # held open until the trial is over; the kernel closes it if this process dies (see the docstring)
            lifeline = container.attach_socket(params={"stdin": 1, "stream": 1})
            stream = container.attach(stdout=True, stderr=True, stream=True, logs=False)
            reader = threading.Thread(target=_pump_stream, args=(stream, log), daemon=True)
            reader.start()
            container.start()
            exited = threading.Event()
            waiter = threading.Thread(target=_wait, args=(container, exited), daemon=True)
            waiter.start()
            sup.watch(exited.wait, stopping="the container")
            if not exited.is_set():
                with contextlib.suppress(Exception):
                    container.stop(timeout=0 if sup.interrupted.is_set() else max(1, round(self.grace_s)))
                exited.wait(timeout=30)
            if reader is not None:
                reader.join(timeout=10)
            container.reload()
            state = container.attrs["State"]
        except BaseException:
            _kill(container)
            raise
        finally:
            reaper.unregister(container.id)
            with contextlib.suppress(Exception):
                container.remove(force=True)
            KEEPER.release(container.id)
            _close_socket(lifeline)
        sup.finish(bool(state.get("OOMKilled")))
        return sup.result(int(state.get("ExitCode", -1)), self.name, image_digest=image.id)

    # -- pieces --------------------------------------------------------------------------------------------
    def _user_for(self, workspace: Path) -> str:
        """Run as the workspace's owner, never as root: a writable folder the (root) host made is handed to the
        image's `rlloop` user (the folder itself; what else the trial sees is read-only and world-readable)."""
        st = workspace.lstat()
        if st.st_uid != 0 and os.geteuid() != 0:
            return f"{st.st_uid}:{st.st_gid}"
        hand_to_sandbox_user(workspace)
        return f"{SANDBOX_UID}:{SANDBOX_UID}"

    @staticmethod
    def _volumes(request: SandboxRequest) -> list[Any]:
        """Bind mounts, the workspace first and read-write, the rest read-only, in order (a mount inside the
        workspace lies over it); one host folder may be seen at two targets (the base model as the start
        checkpoint too). A missing source is refused, never created (`_check_paths`)."""
        types = docker_sdk().types
        binds = [(request.workspace, request.inside(True), False)]
        binds += [(Path(src), Path(spec["bind"]), True) for src, spec in live_code_mounts().items()]
        binds += [(m.source, m.target or m.source, True) for m in request.mounts]
        return [
            types.Mount(target=str(target), source=str(source), type="bind", read_only=ro)
            for source, target, ro in binds
        ]

    def _grader_network(self, grader_url: str) -> GraderNetwork:
        if not grader_url:
            raise ValueError("network='grader' needs grader_url (the grading server's http://host:port)")
        with self._lock:
            gate = self._networks.get(grader_url)
            if gate is None:
                gate = self._networks[grader_url] = GraderNetwork(self.client, grader_url)
            return gate

    # -- cleanup -------------------------------------------------------------------------------------------
    def cleanup(self, labels: dict[str, str] | None = None) -> CleanupReport:
        """Remove every rlloop container carrying `labels` (all of them when None), running or exited (a trial
        whose run died stops by itself but stays until removed); when None, also leftover grader networks of other
        processes. Returns how many containers were removed and what each was ("trial container of t03")."""
        wanted = {MANAGED_LABEL: "true", **(labels or {})}
        filters = {"label": [f"{k}={v}" for k, v in wanted.items()]}
        removed: list[str] = []
        for container in self.client.containers.list(all=True, filters=filters):
            with contextlib.suppress(Exception):
                trial = (container.labels or {}).get("rlloop.trial")
                state = container.status  # from the listing, before the removal
                container.remove(force=True)
                what = f"trial container of {trial}" if trial else f"container {container.short_id}"
                removed.append(what if state == "running" else f"{what} ({state})")
        if labels is None:
            with self._lock:
                live = {gate.name for gate in self._networks.values()}
            remove_leftovers(self.client, keep=live)
        return CleanupReport(removed)

    def close(self) -> None:
        """Drop this sandbox's grader networks, relays and firewall chains."""
        with self._lock:
            gates = list(self._networks.values())
            self._networks.clear()
        for gate in gates:
            gate.close()


def _limits(request: SandboxRequest) -> dict[str, Any]:
    docker = docker_sdk()

    kw: dict[str, Any] = {}
    if request.memory_mb is not None:
        kw["mem_limit"] = f"{request.memory_mb}m"
        kw["memswap_limit"] = f"{request.memory_mb}m"  # equal to mem_limit: no swap
    if request.cpus is not None:
        kw["nano_cpus"] = int(request.cpus * 1e9)
    if request.max_processes is not None:
        kw["pids_limit"] = request.max_processes
    if request.gpus:
        kw["device_requests"] = [
            docker.types.DeviceRequest(device_ids=[str(g) for g in request.gpus], capabilities=[["gpu"]])
        ]
    return kw


def _ulimits(request: SandboxRequest) -> list[Any]:
    docker = docker_sdk()

    return [
        docker.types.Ulimit(name=name, soft=soft, hard=hard)
        for name, (soft, hard) in supervise.rlimits(request).items()
    ]


def _pump_stream(stream: Any, log: CappedLog) -> None:
    with contextlib.suppress(Exception):
        for chunk in stream:
            log.write(chunk)


def _wait(container: Any, exited: threading.Event) -> None:
    with contextlib.suppress(Exception):
        container.wait()
    exited.set()


def _close_socket(sock: Any) -> None:
    """Close the attach socket itself: closing the SDK's SocketIO wrapper alone leaves the connection open."""
    if sock is None:
        return
    with contextlib.suppress(Exception):
        getattr(sock, "_sock", sock).close()
    with contextlib.suppress(Exception):
        sock.close()


def _kill(container: Any) -> None:
    with contextlib.suppress(Exception):
        container.kill()


def _check_paths(request: SandboxRequest) -> None:
    """The engine binds absolute paths only, and makes a missing mount source a root-owned folder: refuse both."""
    if not request.workspace.is_absolute():
        raise ValueError(f"workspace {request.workspace} must be given by its absolute path")
    for mount in request.mounts:
        if not mount.source.exists():
            raise ValueError(f"mount source {mount.source} does not exist: create it or drop the mount")
