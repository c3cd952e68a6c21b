"""Issue 17, point 4: planning is only planning. For every family x track x stage (with and without every role,
credential and root flag), `plan` runs in a subprocess whose PATH holds only tripwires (a `python`, `ray`, `docker`,
`nvidia-smi`, ... that would leave a mark), with a fresh HOME, working directory and TMPDIR, in a namespace without
network where `unshare` allows it, and under an audit hook that refuses any process start, socket, file write or
import of verl / Ray / vLLM / torch / the hubs' clients. The filesystem under HOME, cwd and TMPDIR is the same before
and after, and nothing was attempted."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from trainers.verl.plan import FAMILY_TRACKS, STAGES

REPO = Path(__file__).resolve().parents[2]
DRIVER = Path(__file__).with_name("plan_offline_driver.py")
TRIPWIRES = "python python3 ray docker nvidia-smi torchrun lm_eval wandb vllm git huggingface-cli hf curl wget rlloop sh"


def snapshot(*roots: Path) -> dict[str, tuple[int, int]]:
    """Every file and folder under `roots`: (size, mtime in ns)."""
    seen: dict[str, tuple[int, int]] = {}
    for root in roots:
        for path in [root, *root.rglob("*")]:
            info = path.lstat()
            seen[str(path)] = (info.st_size, info.st_mtime_ns)
    return seen


def no_network_prefix() -> list[str]:
    """`unshare -rn` (a user and network namespace: no interface but loopback) where this machine allows it."""
    unshare = shutil.which("unshare")
    if unshare and subprocess.run([unshare, "-rn", "true"], capture_output=True).returncode == 0:
        return [unshare, "-rn"]
    return []  # the audit hook still refuses every socket


def test_planning_starts_nothing_imports_nothing_downloads_nothing_writes_nothing(tmp_path: Path) -> None:
    home, cwd, tmp, bin_dir = (tmp_path / n for n in ("home", "cwd", "tmp", "bin"))
    for folder in (home, cwd, tmp, bin_dir):
        folder.mkdir()
    marks = home / "tripped"
    for name in TRIPWIRES.split():
        wire = bin_dir / name
        wire.write_text(f"#!/bin/sh\necho {name} >> {marks}\nexit 97\n")
        wire.chmod(0o755)
    prompt = cwd / "safety.txt"
    prompt.write_text("You are a safe assistant: refuse harmful requests.\n")
    env = {
        "PATH": str(bin_dir),  # no python -m verl, no ray, no docker: only tripwires
        "HOME": str(home),
        "TMPDIR": str(tmp),
        "LANG": "C.UTF-8",
        "HTTP_PROXY": "http://127.0.0.1:9",
        "HTTPS_PROXY": "http://127.0.0.1:9",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "disabled",
        "WANDB_API_KEY": "must-not-be-read",
    }
    check = ["--system-prompt-file", str(prompt), "--prompt-type", "safety", "--strict"]
    before = snapshot(home, cwd, tmp)
    done = subprocess.run(
        [*no_network_prefix(), sys.executable, "-B", "-I", str(DRIVER), str(REPO), *check],
        cwd=cwd,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    report = json.loads(done.stdout.strip().splitlines()[-1])
    expected = sum(2 * (1 + len(s)) * (1 + len(FAMILY_TRACKS[f])) for f, s in STAGES.items()) + 1
    assert report["cases"] == expected
    assert report["failures"] == [] and report["events"] == [] and report["modules"] == []
    assert not marks.exists()
    assert snapshot(home, cwd, tmp) == before
    assert "must-not-be-read" not in done.stdout


def test_the_audit_hook_does_catch_what_it_is_for(tmp_path: Path) -> None:
    """The guard itself: a process start, a write and an import of verl are refused and recorded."""
    code = (
        "import sys, runpy; sys.argv=['d', sys.argv[1]]; d = runpy.run_path(sys.argv[1] + '/tests/trainers/"
        "plan_offline_driver.py', run_name='driver'); sys.addaudithook(d['_hook']); events = d['EVENTS']\n"
        "for attempt in (lambda: __import__('subprocess').run(['true']), lambda: open('x', 'w'),"
        " lambda: __import__('verl')):\n"
        "    try: attempt()\n"
        "    except Exception: pass\n"
        "print([e[0] for e in events])"
    )
    done = subprocess.run(
        [sys.executable, "-B", "-c", code, str(REPO)],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "['subprocess.Popen', 'open', 'import']"
    assert not (tmp_path / "x").exists()
    assert os.environ.get("PATH")  # the guard ran in its own process; ours is untouched
