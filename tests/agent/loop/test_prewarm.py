"""Warm trials (agent.loop.prewarm): the next trial's sandbox starts and imports while the current one trains, and
takes its proposal when it is final. The trial trains as it would in a fresh sandbox, its clock starts at its go,
and nothing of a warm sandbox that did not train is left behind."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from agent.status.runs import read_state
from sandbox import untrusted

REPO = Path(__file__).resolve().parents[3]


def rlloop(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "RLLOOP_HOME": str(home)}
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        cwd=REPO,
    )


@pytest.mark.slow
def test_the_next_trial_trains_in_the_sandbox_started_while_this_one_trained(tiny_model_home: Path) -> None:
    home = tiny_model_home
    done = rlloop(
        home, "run", "--run-id", "warm", "--proposer", "tree", "--recipes", "sft", "--loop-n", "3",
        "--trial-seconds", "20", "--eval-limit", "100", "--valid-limit", "100", "--sandbox", "local",
        "--quiet",
    )  # fmt: skip
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-3000:]
    run_dir = home / "runs" / "warm"
    trials = read_state(run_dir)["trials"]
    assert [t["status"] for t in trials] == ["succeeded"] * 3, [t.get("error") for t in trials]
    for trial in trials:
        log = (run_dir / "trials" / trial["trial_id"] / "log.txt").read_text()
        metrics = json.loads((run_dir / "trials" / trial["trial_id"] / "output" / "metrics.json").read_text())
        # every trial's sandbox started early: t01 beside the grader's start, the others beside their elder
        assert "warm: the trainer library is imported" in log, log[:2000]
        assert metrics["startup_parts"]["imports"] < 2.0, metrics["startup_parts"]  # done before the go
        assert metrics["schedule_progress"] > 0.8 and metrics["wall_seconds"] <= 20.0 + 1.0
    continued = [t for t in trials if t["proposal"]["init_from"]]
    assert continued, "the tree continues a checkpoint: the warm sandbox's /model took its parent's files"
    # the host's start folders are gone, and so is anything of a fourth trial (none was launched: loop-n 3)
    assert not (run_dir / "starts").exists() or not any((run_dir / "starts").iterdir())
    assert not (run_dir / "trials" / "t04").exists()


def test_a_start_checkpoint_is_linked_file_by_file_and_a_link_in_it_is_refused(tmp_path: Path) -> None:
    source = tmp_path / "trial" / "output"
    (source / "sub").mkdir(parents=True)
    (source / "config.json").write_text("{}")
    (source / "sub" / "weights.bin").write_bytes(b"w" * 100)
    dest = tmp_path / "start"
    dest.mkdir()
    untrusted.link_tree(tmp_path / "trial", "output", dest)
    assert (dest / "config.json").read_text() == "{}" and (dest / "sub" / "weights.bin").stat().st_size == 100
    assert (dest / "config.json").stat().st_ino == (
        source / "config.json"
    ).stat().st_ino  # a link, not a copy
    (source / "leak").symlink_to("/etc/passwd")
    other = tmp_path / "start2"
    other.mkdir()
    with pytest.raises(untrusted.UntrustedPathError, match="not links"):
        untrusted.link_tree(tmp_path / "trial", "output", other)


def test_across_file_systems_the_files_are_copied(tmp_path: Path) -> None:
    shm = Path("/dev/shm")
    if not shm.is_dir() or os.stat(shm).st_dev == os.stat(tmp_path).st_dev:
        pytest.skip("no second file system here")
    source = tmp_path / "trial" / "output"
    source.mkdir(parents=True)
    (source / "model.safetensors").write_bytes(b"x" * 1000)
    dest = shm / f"rlloop-link-{os.getpid()}"
    dest.mkdir()
    try:
        untrusted.link_tree(tmp_path / "trial", "output", dest)
        assert (dest / "model.safetensors").read_bytes() == b"x" * 1000
    finally:
        import shutil

        shutil.rmtree(dest)
