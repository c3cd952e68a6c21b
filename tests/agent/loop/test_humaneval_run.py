"""`rlloop run --benchmark humaneval` end to end through the real CLI, on tiny-chat (byte-level BPE, so code text
survives its tokenizer): baseline, two SFT trials in the local sandbox, every checkpoint graded on problems 82-163
with the completions executed in the grader's namespace sandbox. The score stays near zero; the path is the test."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import sys
from pathlib import Path

import pytest

from agent.status.runs import read_state
from sandbox import namespaces

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        not namespaces.probe().isolated, reason="the grader runs HumanEval code only in namespaces"
    ),
]


def test_humaneval_run_end_to_end(tmp_path: Path, tiny_chat_dir: Path) -> None:
    home = tmp_path / "home"
    shutil.copytree(tiny_chat_dir, home / "models" / "tiny-chat")
    args = ["run", "--base-model", "tiny-chat", "--benchmark", "humaneval", "--loop-n", "2", "--run-id", "he"]
    # a wall budget far above the run's need (it took 250 s on one 2-core machine and 640 s on a slower one, where
    # a 10-minute budget ended the run after one trial): this test is about two trials, not about speed
    args += ["--timeout", "25m", "--trial-timeout", "5m", "--trial-steps", "4", "--eval-limit", "8"]
    args += ["--valid-limit", "8", "--sandbox", "local", "--submit", "all", "--quiet"]
    result = subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env={**os.environ, "RLLOOP_HOME": str(home)},
        capture_output=True,
        text=True,
        timeout=1600,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    run_dir = home / "runs" / "he"
    state = read_state(run_dir)
    assert state["status"] == "finished" and len(state["trials"]) == 2
    assert state["baseline_score"] is not None
    succeeded = [t for t in state["trials"] if t["status"] == "succeeded"]
    assert len(succeeded) == 2, state["trials"]

    # every checkpoint was graded on the hidden half: scores between 0 and 1 in the grader's own store
    conn = sqlite3.connect(run_dir / "grader" / "store.db")
    try:
        rows = conn.execute("SELECT public_score FROM submissions WHERE public_score IS NOT NULL").fetchall()
    finally:
        conn.close()
    assert len(rows) == 2 and all(0.0 <= float(r[0]) <= 1.0 for r in rows)

    # the workspace holds the public 82 problems only
    data = run_dir / "workspace" / "data"
    assert not list((run_dir / "workspace").rglob("test.jsonl"))
    train = [json.loads(line) for line in (data / "train.jsonl").read_text().splitlines()]
    valid = [json.loads(line) for line in (data / "valid.jsonl").read_text().splitlines()]
    assert (len(train), len(valid)) == (70, 12)
    assert all(int(r["id"].rsplit("-", 1)[1]) < 82 for r in train + valid)
