"""Run `plan` for every family x track x stage (and `check-inputs` on the files given) in this process, with an
audit hook that refuses and records any process start, network use, file write or import of verl, Ray, vLLM,
torch or the hubs' clients; print what happened as JSON. `test_verl_plan_offline` runs it in a subprocess with a
`PATH` of tripwires, a fresh HOME and working directory, and (where it can) no network namespace.

Usage: python -B -I plan_offline_driver.py REPO_ROOT [CHECK_INPUTS_ARGS...]
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

BLOCKED_MODULES = (
    "verl", "ray", "vllm", "torch", "transformers", "wandb", "huggingface_hub", "openai", "requests", "httpx",
    "urllib3", "docker", "lmops", "mlflow",
)  # fmt: skip
BLOCKED_EVENTS = (
    "subprocess.Popen", "os.system", "os.exec", "os.posix_spawn", "os.spawn", "os.fork", "os.forkpty", "pty.spawn",
    "socket.connect", "socket.bind", "socket.sendto", "socket.sendmsg", "socket.getaddrinfo", "socket.gethostbyname",
    "socket.gethostbyaddr", "urllib.Request", "ctypes.dlopen",
)  # fmt: skip
WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_APPEND | os.O_TRUNC
EVENTS: list[list[str]] = []


def _hook(event: str, args: tuple[Any, ...]) -> None:
    if event == "ctypes.dlopen" and args and args[0] is None:
        return  # `import ctypes` opens the interpreter itself (PyDLL(None)); a named library stays refused
    if event in BLOCKED_EVENTS or event.startswith(("os.exec", "os.spawn")):
        EVENTS.append([event, repr(args)[:200]])
        raise RuntimeError(f"planner tried {event}")
    if event == "import" and str(args[0]).split(".")[0] in BLOCKED_MODULES:
        EVENTS.append([event, str(args[0])])
        raise ImportError(f"planner tried to import {args[0]}")
    if event == "open":
        path, mode, flags = args
        writes = (isinstance(mode, str) and any(c in mode for c in "wax+")) or (
            isinstance(flags, int) and flags & WRITE_FLAGS
        )
        if writes:
            EVENTS.append([event, f"{path} {mode} {flags}"])
            raise PermissionError(f"planner tried to write {path}")
    if event in ("os.remove", "os.rename", "os.mkdir", "os.rmdir", "os.symlink", "os.link", "shutil.rmtree"):
        EVENTS.append([event, repr(args)[:200]])
        raise PermissionError(f"planner tried {event}")


def main(argv: list[str]) -> int:
    sys.path.insert(0, argv[0])
    sys.addaudithook(_hook)
    from typer.testing import CliRunner

    from trainers.verl.cli import app
    from trainers.verl.plan import FAMILY_TRACKS, STAGES

    runner = CliRunner()
    roles = [
        *(["--model", "Qwen/Qwen3-8B", "--teacher", "<MODEL_ROOT>/teacher", "--coach", "gpt-4o", "--discriminator", "<MODEL_ROOT>/d"]),
        *(["--checkpoint-step", "100-300:100", "--gpu-class", "B200", "--credentials", "wandb,hf,openai", "--json"]),
        *(["--data-root", "/shared/data", "--exp-name", "e17"]),
    ]  # fmt: skip
    cases, failures = 0, []
    for family, stages in STAGES.items():
        for track in [None, *FAMILY_TRACKS[family]]:
            tracked = [] if track is None else ["--track", track]
            if track == "system-prompt":
                tracked += ["--prompt-type", "safety", "--experience-path", "<PROMPT_FILE>"]
            for stage in ["all", *stages]:
                for extra in ([], roles):
                    args = ["plan", "--family", family, "--stage", stage, *tracked, *extra]
                    out = runner.invoke(app, args)
                    cases += 1
                    if out.exit_code != 0:
                        failures.append([" ".join(args), out.output[-300:]])
    if len(argv) > 1:
        out = runner.invoke(app, ["check-inputs", *argv[1:]])
        cases += 1
        if out.exit_code != 0:
            failures.append([" ".join(argv[1:]), out.output[-300:]])
    heavy = sorted({m.split(".")[0] for m in sys.modules} & set(BLOCKED_MODULES))
    print(json.dumps({"cases": cases, "events": EVENTS, "failures": failures, "modules": heavy}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
