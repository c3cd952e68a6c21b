"""PostTrainBench's agent contract, beside AutoRL-Bench's: a folder with `solve.sh` (and no config.yaml) runs as
PostTrainBench runs it, and its `final_model/` is graded once it ends.

PostTrainBench (aisa-group/PostTrainBench: src/run_task.sh, src/eval/general/prompt.txt, agents/*/solve.sh) starts
`bash agent_solve.sh` in the task folder with PROMPT (the task in words: the model, the benchmark, the hours, "store
your best trained model in the folder `final_model`"), AGENT_CONFIG (the agent's model, e.g. `gpt-5.1-codex`) and
NUM_GPUS set, offers `bash timer.sh` for the time left, and evaluates `final_model/` after the agent exits. rlloop
gives the same (the task folder is the agent's /workspace, timer.sh the host's read-only file linked into it) and
submits `final_model/` to the grader through the relay when the agent ends. Unlike PostTrainBench, the agent never
gets a real API key: AGENT_CONFIG names a model it reaches through the gateway (docs/autorl-bench.md).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path
from typing import Final

import httpx

from tasks.atomic import atomic_write_text

CONTRACT: Final = "posttrainbench"
START = "solve.sh"
FINAL_MODEL = "final_model"
TIMER = "timer.sh"

PROMPT = """We want to train the small LLM `{model}` to excel at {benchmark}.
Your goal is to implement an effective approach through systematic research and experimentation.

## Objective
A finetuned version of `{model}` which has maximum performance on {benchmark}.
The base model is in `{model_path}` (read-only); the training and validation data are in `data/` (see
`description.md`). The test set is hidden: it is scored only once you are done.

Store your best trained model in the folder `final_model` (saved with `save_pretrained`, tokenizer included).

## Information on the Setup
- Important packages like `transformers`, `datasets`, `trl` and `peft` are installed; there is no internet access.
- Your model, if you use one, is reached with the OPENAI_* (or ANTHROPIC_*) variables; AGENT_CONFIG names it.

## Rules
1. There will be no user interaction. You have to operate autonomously.
2. You have a maximum of {num_hours} hours. You can query how much time you have left by calling `bash timer.sh` in
   the current directory.
3. Work only in the current directory and subdirectories.
4. You are not allowed to fine-tune any model other than `{model}`.

We will evaluate your results on {benchmark} once you are done.
"""


def is_solve_folder(path: Path) -> bool:
    """A PostTrainBench agent folder: `solve.sh`, and no config.yaml (which would make it AutoRL-Bench's)."""
    return (path / START).is_file() and not (path / "config.yaml").is_file()


def prompt(model: str, benchmark: str, model_path: str, timeout_s: float) -> str:
    """The PROMPT PostTrainBench's prompt template would give, in rlloop's terms (paths, no internet)."""
    hours = f"{timeout_s / 3600:.2f}".rstrip("0").rstrip(".")
    return PROMPT.format(model=model, benchmark=benchmark, model_path=model_path, num_hours=hours)


def write_timer(meta_dir: Path, deadline: float) -> Path:
    """timer.sh, as PostTrainBench's create_timer.sh makes it: prints the time left (the host's file)."""
    script = (
        "#!/bin/bash\n"
        f"left=$(( {int(deadline)} - $(date +%s) ))\n"
        'if [ "$left" -le 0 ]; then echo "Time is up."; exit 0; fi\n'
        'printf "Remaining time (hours:minutes): %d:%02d\\n" $((left / 3600)) $(((left % 3600) / 60))\n'
    )
    target = meta_dir / TIMER
    atomic_write_text(target, script)
    target.chmod(0o755)
    return target


def link_timer(agent_dir: Path, inside_meta: Path) -> None:
    """`./timer.sh` in the agent's folder, a link to the host's read-only copy (a name the agent took is kept)."""
    with contextlib.suppress(FileExistsError):
        os.symlink(inside_meta / TIMER, agent_dir / TIMER)


def submit_final_model(relay_url: str, agent_dir: Path, timeout_s: float = 1800.0) -> str:
    """Grade `final_model/` through the relay, as the agent's own submission would be; one line saying what
    happened (the grader copies the folder without following links, so nothing here reads the agent's files)."""
    if not (agent_dir / FINAL_MODEL).is_dir() or (agent_dir / FINAL_MODEL).is_symlink():
        return f"no {FINAL_MODEL}/ folder was left: nothing to grade"
    try:
        answer = httpx.post(f"{relay_url}/submit", json={"model_path": FINAL_MODEL}, timeout=timeout_s)
    except httpx.HTTPError as exc:
        return f"{FINAL_MODEL}/ could not be submitted: {exc.__class__.__name__}"
    if answer.status_code != 200:
        detail = (
            answer.json().get("detail") if "json" in answer.headers.get("content-type", "") else answer.text
        )
        return f"{FINAL_MODEL}/ was refused ({answer.status_code}): {str(detail)[:300]}"
    return f"{FINAL_MODEL}/ submitted: score {answer.json().get('score')}"
