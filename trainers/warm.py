"""`python -m trainers.warm GO_FILE`: a trial's interpreter started before its proposal is known.

The host starts a trial's sandbox while the previous trial trains (agent.loop.prewarm).
Inside it, this imports the trainer library (torch, transformers, TRL, datasets, peft and every built-in recipe),
then waits for the host's go: a JSON file the host writes into the trial's own read-only folder, holding the command
the trial runs (`["-m", "trainers", RECIPE, "--config", FILE]` or `[TRAIN_PY, ...]`) and the moment its clock
started. The trial's `max_seconds` count from that moment: the imports were paid while the host did other work.
Nothing is shared with another trial: the sandbox, its folders and this process are the trial's own.

{"cancel": true} instead ends it with exit code 0 (the run ended, or the next proposal needs a fresh sandbox).
"""

from __future__ import annotations

import contextlib
import json
import os
import runpy
import sys
import threading
import time
from pathlib import Path
from typing import Any

WARM_NICENESS = 10
RECIPES_ENV = (
    "RLLOOP_RUN_RECIPES"  # the recipes the run may propose (the host's hint): sft's data is prepared
)
WAIT_MAX_S = 3600.0  # a go that never comes: the process ends by itself (the sandbox's deadline is later)
POLL_S = 0.01


def import_library() -> None:
    """Everything a recipe imports before its first step, so a go starts training at once."""
    import datasets  # noqa: F401
    import peft  # noqa: F401
    import torch  # noqa: F401
    import transformers  # noqa: F401
    from transformers import AutoModelForCausalLM, AutoTokenizer  # noqa: F401

    try:
        import trl  # noqa: F401
        from trl import DPOTrainer, GRPOTrainer, SFTTrainer  # noqa: F401
    except ImportError:  # an image without TRL: its recipes say so when chosen
        pass
    from trainers.registry import list_recipes

    list_recipes()  # every built-in recipe module


def prepare_data() -> None:
    """Tokenize the workspace's training file for SFT with the base model's tokenizer and SFT's defaults, as the
    trial would if it trains with them (`trainers.data.tokenized_sft_dataset` keeps it by content: the file's
    bytes, the tokenizer's, the options). A trial that asks otherwise tokenizes its own; nothing is lost."""
    train_file, base = (
        Path(os.environ.get("DATA_PATH", "")) / "train.jsonl",
        os.environ.get("BASE_MODEL_PATH"),
    )
    if not base or not train_file.is_file() or "sft" not in os.environ.get(RECIPES_ENV, "sft").split(","):
        return
    try:
        from transformers import AutoTokenizer

        from trainers.algorithms.sft import SFTRecipeConfig
        from trainers.data import tokenized_sft_dataset

        defaults = SFTRecipeConfig.model_fields
        tokenizer = AutoTokenizer.from_pretrained(base)
        if tokenizer.pad_token is None:
            tokenizer.pad_token = tokenizer.eos_token
        tokenized_sft_dataset(
            train_file,
            tokenizer,
            max_length=defaults["max_length"].default,
            completion_only_loss=defaults["completion_only_loss"].default,
        )
    except Exception as exc:  # noqa: BLE001 - a head start only: the trial tokenizes for itself
        print(f"[trainers] warm: no tokenized head start ({type(exc).__name__}: {exc})", flush=True)


def wait_for(go_file: Path, wait_max_s: float = WAIT_MAX_S) -> dict[str, Any] | None:
    """The host's go, once it appears (None: none came within `wait_max_s`)."""
    deadline = time.monotonic() + wait_max_s
    while time.monotonic() < deadline:
        try:
            data = json.loads(go_file.read_text())
        except (FileNotFoundError, json.JSONDecodeError):  # not there yet (written atomically: never half)
            time.sleep(POLL_S)
            continue
        return data if isinstance(data, dict) else None
    return None


def run(go: dict[str, Any]) -> int:
    """Run the command of `go` in this interpreter, as a fresh one would run it."""
    from trainers.schedule import TRIAL_STARTED_ENV

    argv = [str(a) for a in go.get("argv") or []]
    os.environ[TRIAL_STARTED_ENV] = f"{float(go['started_at']):.3f}"
    if argv[:2] == ["-m", "trainers"]:
        from trainers.__main__ import main

        sys.argv = ["python -m trainers", *argv[2:]]
        return main(argv[2:])
    if argv and argv[0].endswith(".py"):
        sys.argv = argv
        try:
            runpy.run_path(argv[0], run_name="__main__")
        except SystemExit as exc:  # the script's own exit code, as a fresh interpreter would end with it
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        return 0
    print(f"error: the host's go names no runnable command: {argv!r}", file=sys.stderr, flush=True)
    return 2


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if len(args) != 1:
        print("usage: python -m trainers.warm GO_FILE", file=sys.stderr)
        return 2
    warming = threading.Thread(target=warm_up, name="warm-up", daemon=True)
    warming.start()
    go = wait_for(Path(args[0]))
    if go is None or go.get("cancel"):
        return 0
    warming.join()  # a go before the imports ended: they finish first (the trial would import them anyway)
    return run(go)


def warm_up() -> None:
    """The imports and the data, in a thread of its own at a lower priority: the previous trial trains meanwhile,
    and the host then validates it; their work goes first. Only this thread is niced (Linux niceness is a thread's),
    and a process cannot take back a niceness it gave up: the trial itself trains in the main thread at the
    priority it was started with, beside other runs' trials on a shared machine."""
    with contextlib.suppress(OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), WARM_NICENESS)
    import_library()
    prepare_data()
    print("[trainers] warm: the trainer library is imported; waiting for the trial's go", flush=True)


if __name__ == "__main__":
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)  # the trial is saved: skip the interpreter's teardown of torch and friends (seconds)
