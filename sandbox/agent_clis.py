"""The coding agents the agent image carries (Claude Code, Codex, OpenCode) and the Node.js they run on, pinned,
npm-installed on the host and packed as one reproducible tar for the image."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path

from sandbox.wheelhouse import wheelhouse_dir
from tasks.atomic import atomic_write_text

# The coding agents people run on PostTrainBench and AutoRL-Bench, unchanged, from the npm registry at these
# versions (`rlloop bench --agents claude-code,codex,opencode`), and the Node.js that Codex's launcher runs on (the
# official binary, as the npm package node-linux-<arch> carries it). npm installs them on the host, where the
# registry answers, each platform binary from its optional package; the image gets the folder as one tar.
AGENT_CLIS = {"@anthropic-ai/claude-code": "2.1.328", "@openai/codex": "0.169.0", "opencode-ai": "1.18.33"}
_NODE_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
AGENT_NODE = (
    f"node-linux-{_NODE_ARCH.get(platform.machine().lower(), 'x64')}",
    "22.23.5",
)  # this host's arch
AGENT_CLI_COMMANDS = ("claude", "codex", "opencode")
AGENT_CLIS_LABEL = "rlloop.agent_clis"  # the image's label naming the CLIs' versions (`agent_clis_pins`)
AGENT_CLIS_TAR = "agent-clis.tar"

Say = Callable[[str], None]


def agent_clis_pins() -> str:
    """`name@version` of every npm package the agent image carries, comma-separated (its label says the same)."""
    return ",".join(
        f"{name}@{version}" for name, version in {**AGENT_CLIS, AGENT_NODE[0]: AGENT_NODE[1]}.items()
    )


def build_agent_clis(say: Say = print, folder: Path | None = None) -> Path:
    """npm-install the coding agents and Node at their pins into `folder` (cached: skipped while its stamp names
    the same pins) and pack the result as one tar (links kept, names sorted, times zeroed: the same pins give the
    same bytes, so Docker's cache holds). Returns the tar's path."""
    folder = folder or wheelhouse_dir() / "agent-npm"
    tar = folder / AGENT_CLIS_TAR
    stamp = folder / ".complete"
    wanted = agent_clis_pins() + "\n"
    if stamp.exists() and stamp.read_text() == wanted and tar.is_file():
        say(f"coding agents {folder} are up to date ({agent_clis_pins()})")
        return tar
    npm = shutil.which("npm")
    if npm is None:
        raise RuntimeError(
            "npm is not installed on this host: the agent image's coding agents (Claude Code, Codex, OpenCode) "
            "come from the npm registry through it; install Node.js and npm (apt-get install nodejs npm), then "
            "rebuild"
        )
    stamp.unlink(missing_ok=True)
    tree = folder / "tree"
    shutil.rmtree(tree, ignore_errors=True)
    tree.mkdir(parents=True)
    deps = {**AGENT_CLIS, AGENT_NODE[0]: AGENT_NODE[1]}
    (tree / "package.json").write_text(
        json.dumps({"name": "rlloop-agent-clis", "private": True, "dependencies": deps}, indent=2) + "\n"
    )
    say(f"npm install {' '.join(f'{n}@{v}' for n, v in deps.items())} (about 1 GB, once; cached in {folder})")
    result = subprocess.run(
        [npm, "install", "--no-audit", "--no-fund", "--no-update-notifier", "--omit=dev"],
        cwd=tree,
        capture_output=True,
        text=True,
    )
    if result.returncode != 0:
        raise RuntimeError(f"npm install failed (exit {result.returncode}):\n{result.stderr[-3000:]}")
    missing = [c for c in AGENT_CLI_COMMANDS if not (tree / "node_modules" / ".bin" / c).exists()]
    if missing or not (tree / "node_modules" / AGENT_NODE[0] / "bin" / "node").is_file():
        raise RuntimeError(f"npm install left no {', '.join(missing) or 'node'} in {tree / 'node_modules'}")
    _link_duplicates(tree / "node_modules")
    partial = tar.with_suffix(".tar.part")
    subprocess.run(
        [
            "tar",
            "--sort=name",
            "--mtime=@0",
            "--owner=0",
            "--group=0",
            "--numeric-owner",
            "-C",
            str(tree),
            "-cf",
            str(partial),
            "node_modules",
        ],
        check=True,
    )
    os.replace(partial, tar)
    shutil.rmtree(tree, ignore_errors=True)
    atomic_write_text(stamp, wanted)  # last: a build cut short leaves none, so the next one installs again
    say(f"coding agents packed: {tar} ({tar.stat().st_size / 1e9:.2f} GB)")
    return tar


def _link_duplicates(tree: Path, min_bytes: int = 1 << 20) -> None:
    """Hard-link identical large files (a launcher package's copy of its platform binary: OpenCode's 185 MB), so
    the tar, the context and the image carry each once."""
    seen: dict[tuple[int, str], Path] = {}
    for path in sorted(tree.rglob("*")):
        if path.is_symlink() or not path.is_file() or path.stat().st_size < min_bytes:
            continue
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
        key = (path.stat().st_size, digest.hexdigest())
        first = seen.setdefault(key, path)
        if first != path and not path.samefile(first):
            mode = path.stat().st_mode
            path.unlink()
            os.link(first, path)
            os.chmod(path, mode)
