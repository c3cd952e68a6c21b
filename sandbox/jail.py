"""Find and stop every process a local command started, including ones that double-forked away from it.

A process group is not enough: `setsid` and double forks leave it. Two nets catch escapees, as root on Linux:

* a cgroup (v1 `memory`, `pids`, `cpu`, `freezer` hierarchies) that the command joins before it execs; children
  cannot leave it, and it also enforces the memory (no swap), process-count and CPU-share limits;
* an environment marker (`RLLOOP_SANDBOX_ID=<id>`) that children inherit, found by scanning `/proc/*/environ`;
  used when no writable cgroup hierarchy exists, and in addition to it otherwise.

Neither is a security boundary: a hostile command can clear its environment, and without cgroups escape.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
import uuid
from pathlib import Path

from tasks import procfs

MARKER_ENV = "RLLOOP_SANDBOX_ID"
CGROUP_V1_ROOT = Path("/sys/fs/cgroup")
_CONTROLLERS = ("memory", "pids", "cpu", "freezer")


def cgroup_v1_available() -> bool:
    """True when this process may create cgroups in the v1 memory and pids hierarchies."""
    return all(
        (CGROUP_V1_ROOT / c / "cgroup.procs").exists() and os.access(CGROUP_V1_ROOT / c, os.W_OK)
        for c in ("memory", "pids")
    )


class Jail:
    """The set of processes that belong to one command run, with optional cgroup limits."""

    def __init__(
        self,
        use_cgroup: bool | None = None,
        memory_mb: int | None = None,
        max_processes: int | None = None,
        cpus: float | None = None,
    ) -> None:
        self.id = uuid.uuid4().hex
        self.leader: int | None = None
        self.cgroups: dict[str, Path] = {}
        if use_cgroup is None:
            use_cgroup = cgroup_v1_available()
        if use_cgroup:
            self._make_cgroups(memory_mb, max_processes, cpus)

    @property
    def marker(self) -> tuple[str, str]:
        return MARKER_ENV, self.id

    @property
    def uses_cgroup(self) -> bool:
        return bool(self.cgroups)

    def _make_cgroups(self, memory_mb: int | None, max_processes: int | None, cpus: float | None) -> None:
        try:
            for controller in _CONTROLLERS:
                base = CGROUP_V1_ROOT / controller
                if not (base / "cgroup.procs").exists():
                    continue
                path = base / "rlloop" / self.id
                path.mkdir(parents=True, exist_ok=True)
                self.cgroups[controller] = path
            memory = self.cgroups.get("memory")
            if memory is not None and memory_mb is not None:
                limit = str(memory_mb * 1024 * 1024)
                (memory / "memory.limit_in_bytes").write_text(limit)
                memsw = memory / "memory.memsw.limit_in_bytes"
                if memsw.exists():  # swap accounting on: memory + swap capped at the same figure, so no swap
                    memsw.write_text(limit)
            pids = self.cgroups.get("pids")
            if pids is not None and max_processes is not None:
                (pids / "pids.max").write_text(str(max_processes))
            cpu = self.cgroups.get("cpu")
            if cpu is not None and cpus is not None:
                (cpu / "cpu.cfs_period_us").write_text("100000")
                (cpu / "cpu.cfs_quota_us").write_text(str(max(1000, int(cpus * 100000))))
        except OSError:
            self.close()
            self.cgroups = {}
            raise

    def enter(self) -> None:
        """Join the cgroups; called in the child between fork and exec."""
        pid = str(os.getpid())
        for path in self.cgroups.values():
            with open(path / "cgroup.procs", "w") as f:
                f.write(pid)

    def members(self) -> set[int]:
        """Live pids of this run: cgroup members, marker carriers and the leader's session."""
        pids: set[int] = set()
        for path in self.cgroups.values():
            with contextlib.suppress(OSError):
                pids.update(int(p) for p in (path / "cgroup.procs").read_text().split())
        pids.update(self._scan_proc())
        pids.discard(os.getpid())
        return pids

    def _scan_proc(self) -> set[int]:
        """The leader's session and every carrier of the marker (which children inherit, also those that left it)."""
        needle = f"{MARKER_ENV}={self.id}".encode()
        found: set[int] = set()
        for pid in procfs.pids():
            if self._in_session(pid) or needle in (procfs.environ(pid) or []):
                found.add(pid)
        return found

    def _in_session(self, pid: int) -> bool:
        try:
            return self.leader is not None and os.getsid(pid) == self.leader
        except OSError:
            return False

    def signal(self, sig: int) -> int:
        """Send `sig` to every member (frozen first where the freezer exists, so none forks away meanwhile)."""
        frozen = self._freeze(True)
        try:
            if self.leader is not None:
                with contextlib.suppress(OSError):
                    os.killpg(self.leader, sig)
            members = self.members()
            for pid in members:
                with contextlib.suppress(OSError):
                    os.kill(pid, sig)
            return len(members)
        finally:
            if frozen:
                self._freeze(False)

    def kill(self, timeout_s: float = 10.0) -> bool:
        """SIGKILL every member until none is left; False when some survived `timeout_s` (zombies excluded)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            self.signal(signal.SIGKILL)
            time.sleep(0.05)
            if not [p for p in self.members() if procfs.alive(p)]:
                return True
        return False

    def terminate(self, grace_s: float) -> None:
        """SIGTERM everyone, give them `grace_s` to exit, then SIGKILL whoever is left."""
        self.signal(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while time.monotonic() < deadline and [p for p in self.members() if procfs.alive(p)]:
            time.sleep(0.1)
        self.kill()

    def oom_kills(self) -> int:
        memory = self.cgroups.get("memory")
        if memory is None:
            return 0
        with contextlib.suppress(OSError, ValueError):
            for line in (memory / "memory.oom_control").read_text().splitlines():
                key, _, value = line.partition(" ")
                if key == "oom_kill":
                    return int(value)
        return 0

    def close(self) -> None:
        """Remove the cgroups (they must be empty; stragglers are killed first)."""
        if self.cgroups:
            self.kill(timeout_s=5.0)
        for path in self.cgroups.values():
            for _ in range(50):
                try:
                    path.rmdir()
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    time.sleep(0.05)

    def _freeze(self, on: bool) -> bool:
        freezer = self.cgroups.get("freezer")
        if freezer is None:
            return False
        state = freezer / "freezer.state"
        try:
            state.write_text("FROZEN" if on else "THAWED")
            if on:
                for _ in range(100):
                    if state.read_text().strip() == "FROZEN":
                        break
                    time.sleep(0.005)
            return True
        except OSError:
            return False
