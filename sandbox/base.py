"""The contract every sandbox backend meets: run one command in a workspace, within limits, and report how it went."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Protocol, runtime_checkable

from pydantic import BaseModel, Field

Network = Literal["none", "grader"]  # no network at all, or only the grading server (see grader_url)
# What a trial may import of rlloop, on every backend: the trainer image installs and mounts these, the local
# sandbox binds them. Never grader/ or agent/: they know how the hidden test split is drawn (tests/tasks/test_public.py
# keeps tasks/ and trainers/ from importing them).
TRIAL_PACKAGES = ("tasks", "trainers")


class SandboxUnavailableError(RuntimeError):
    """The backend cannot run trials as asked on this machine; the message says why and what to do."""


class Mount(BaseModel):
    """A host path made visible to the command, read-only (the request's `workspace` is its only writable place)."""

    source: Path
    target: Path | None = None  # where the command sees it; same path as on the host when None
    read_only: bool = True


class SandboxRequest(BaseModel):
    """What to run, where, and within which limits.

    The command may write one folder, `workspace`; everything else it sees is read-only. A backend that
    `maps_paths` shows each folder at its target (`workspace_target`, `Mount.target`: fixed paths such as
    /workspace, /model, /output), so nothing inside names a host path; one that does not (the unisolated local
    backend) shows them at their host paths and ignores the targets. The log is the host's: it may not lie in the
    writable folder (`supervise.check_request`)."""

    command: list[str]
    workspace: Path  # the one folder the command may write (its checkpoint, metrics, scratch)
    workspace_target: Path | None = None  # where the command sees it; its host path when None
    workdir: Path | None = (
        None  # the command's working directory as the command sees it; the workspace when None
    )
    log_path: (
        Path  # stdout and stderr of the command, streamed while it runs (a host path outside the workspace)
    )
    timeout_s: float = 600.0  # wall-clock limit
    memory_mb: int | None = 4096  # resident memory limit (no swap where the backend can enforce it)
    cpus: float | None = None  # CPU share; None means the backend's default
    cpu_time_s: int | None = None  # CPU-seconds limit (local backend: RLIMIT_CPU)
    max_processes: int | None = 256
    max_log_bytes: int = 50 * 1024 * 1024  # log is truncated past this, with a marker line
    max_output_mb: int | None = 4096  # files written under the workspace, where the backend can enforce it
    gpus: list[int] = Field(default_factory=list)  # device indices handed to this command alone
    env: dict[str, str] = Field(default_factory=dict)  # on top of a scrubbed minimal environment
    mounts: list[Mount] = Field(default_factory=list)
    network: Network = "none"
    grader_url: str | None = None
    labels: dict[str, str] = Field(default_factory=dict)  # e.g. rlloop.run, rlloop.trial

    def inside(self, maps: bool) -> Path:
        """Where the command sees its workspace, on a backend that maps paths (`maps`) or one that does not."""
        return (self.workspace_target or self.workspace) if maps else self.workspace

    def cwd(self, maps: bool) -> Path:
        """The command's working directory as it sees it."""
        return (self.workdir or self.inside(True)) if maps else self._host_workdir()

    def _host_workdir(self) -> Path:
        """The working directory at its host path (an unmapped run): the mount whose target holds `workdir`."""
        if self.workdir is None:
            return self.workspace
        places = [(self.workspace_target or self.workspace, self.workspace)]
        places += [(m.target or m.source, m.source) for m in self.mounts]
        for inside, host in places:
            if self.workdir == inside or inside in self.workdir.parents:
                return host / self.workdir.relative_to(inside)
        return self.workspace

    def describe(self) -> str:
        """Who is running, for people: "trial t03 of run R" (from the labels), else the command's program."""
        trial, run = self.labels.get("rlloop.trial"), self.labels.get("rlloop.run")
        if trial:
            return f"trial {trial}" + (f" of run {run}" if run else "")
        return f"sandbox command {Path(self.command[0]).name if self.command else '?'}"


class SandboxResult(BaseModel):
    """How a command ended. `exit_code` is None when it was killed before it could exit by itself."""

    exit_code: int | None
    log_path: Path
    duration_s: float
    timed_out: bool = False
    oom_killed: bool = False
    interrupted: bool = False
    output_limit_exceeded: bool = False  # wrote more than max_output_mb under the workspace (stopped)
    log_tail: str = ""
    backend: str = ""
    image_digest: str | None = None
    # where it ran, from a backend that places trials on other machines (`Sandbox.places_on_nodes`; ray): node_id,
    # node_ip, hostname, and the GPU ids it was given on that node; empty from a backend that runs them here
    node: dict[str, str] = Field(default_factory=dict)
    gpus: list[int] = Field(default_factory=list)

    @property
    def ok(self) -> bool:
        return (
            self.exit_code == 0
            and not self.timed_out
            and not self.oom_killed
            and not self.interrupted
            and not self.output_limit_exceeded
        )

    def reason(self) -> str:
        """One line a person can act on."""
        if self.interrupted:
            return "interrupted"
        if self.timed_out:
            return f"timed out after {self.duration_s:.0f}s"
        if self.output_limit_exceeded:
            return "killed: wrote more than max_output_mb under the workspace (write less or raise the limit)"
        if self.oom_killed:
            return "killed: out of memory (raise memory_mb or lower the batch size)"
        if self.exit_code != 0:
            return f"exited with code {self.exit_code}"
        return "ok"


class CleanupReport(int):
    """What `cleanup()` stopped: an int (how many, as the protocol says) that also says what each one was, for the
    run log ("trial container of t03"). Backends that cannot tell return a plain int."""

    what: tuple[str, ...]

    def __new__(cls, what: list[str] | tuple[str, ...] = ()) -> CleanupReport:
        report = super().__new__(cls, len(what))
        report.what = tuple(what)
        return report


def maps_paths(sandbox: Sandbox) -> bool:
    """Whether `sandbox` shows a request's folders at their fixed targets (no host path inside)."""
    return sandbox.maps_paths


class SandboxBase:
    """What a backend can do, declared, with the least as the defaults: host paths, no isolation, this machine's
    CPUs, trials run here. The built-in backends derive from it and set what they do; a plugin backend derives
    from it (or declares the same attributes) so the host never has to probe for them."""

    name: str = ""
    python: str = (
        "python"  # the interpreter a trial runs with (ours for local processes, the image's for containers)
    )
    maps_paths: bool = (
        False  # folders shown at their fixed targets (/workspace, /model, /output...), no host path
    )
    isolation: str = "none"  # how trials are kept from the host: "container", "namespaces" or "none"
    isolation_reason: str = ""  # why that level (what is missing, for "none")
    # a scheduler of its own gives each trial its CPUs and GPUs (ray): concurrent trials are not split over this
    # machine's cores and GPUs by the host
    schedules_resources: bool = False
    # trials may run on other machines: each result says where (`SandboxResult.node`), and each machine must see
    # the run's folder (`check_shared_storage`)
    places_on_nodes: bool = False

    def check_shared_storage(self, folder: Path, shared: Path | None = None) -> list[dict[str, str]]:
        """Make every machine that may run a trial prove it sees `folder`; returns the machines checked. Trials
        that run on this machine see it already: nothing to check."""
        return []


@runtime_checkable
class Sandbox(Protocol):
    """A place to run untrusted training code, with what it can do declared (`SandboxBase` has the defaults)."""

    name: str

    @property
    def python(self) -> str: ...

    @property
    def maps_paths(self) -> bool: ...

    @property
    def isolation(self) -> str: ...

    @property
    def isolation_reason(self) -> str: ...

    @property
    def schedules_resources(self) -> bool: ...

    @property
    def places_on_nodes(self) -> bool: ...

    def run(self, request: SandboxRequest) -> SandboxResult:
        """Run the command to completion (or until a limit), streaming its output to `request.log_path`."""
        ...

    def check_shared_storage(self, folder: Path, shared: Path | None = None) -> list[dict[str, str]]:
        """Make every machine that may run a trial prove it sees `folder`; returns the machines checked."""
        ...

    def cleanup(self, labels: dict[str, str] | None = None) -> int:
        """Stop whatever this backend started that carries these labels, in this process or a dead earlier one;
        return how many were stopped (a `CleanupReport` where the backend can say what they were)."""
        ...
