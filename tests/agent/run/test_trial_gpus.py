"""`--trial-gpus` through the real CLI: on a machine without GPUs the run fails at once with one line; with GPUs
(a stand-in nvidia-smi lists two here) each trial is handed its own and the grader keeps the other."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.sandbox.test_devices import fake_nvidia_smi


def rlloop(home: Path, path: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CUDA_VISIBLE_DEVICES"}
    env.update({"RLLOOP_HOME": str(home), "PATH": path, "RLLOOP_DEVICE_LOCK_DIR": str(home / "locks")})
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "run", *args],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


def test_no_gpu_fails_at_once_with_one_line(tmp_path: Path) -> None:
    home = tmp_path / "home"
    no_driver = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "nvidia-smi").exists()
    )
    started = time.monotonic()
    result = rlloop(home, no_driver, "--trial-gpus", "1", "--sandbox", "local", "--run-id", "gpu-1")
    took = time.monotonic() - started
    assert result.returncode == 2, result.stdout + result.stderr
    lines = [line for line in (result.stdout + result.stderr).splitlines() if line.strip()]
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: no GPU found: --trial-gpus 1 needs 1 CUDA GPU(s) per trial")
    assert lines[0].endswith("run with --trial-gpus 0 to train on CPU")
    assert not (home / "runs" / "gpu-1").exists()  # nothing written, no model built, no grader started
    assert took < 30


@pytest.mark.slow
def test_each_trial_gets_a_gpu_and_the_grader_another(tmp_path: Path, tiny_model_home: Path) -> None:
    path = f"{fake_nvidia_smi(tmp_path / 'bin', 2)}{os.pathsep}{os.environ['PATH']}"
    args = ["--trial-gpus", "1", "--sandbox", "local", "--loop-n", "1", "--trial-steps", "5"]
    args += ["--eval-limit", "40", "--timeout", "10m", "--run-id", "gpus-1", "--quiet"]
    result = rlloop(tiny_model_home, path, *args, timeout=900)
    assert result.returncode == 0, result.stdout + result.stderr[-4000:]
    run_dir = tiny_model_home / "runs" / "gpus-1"
    assert (
        "devices: GPUs 0,1; 1 GPU(s) per trial from 0; grader on GPU 1" in (run_dir / "run.log").read_text()
    )
    trial_log = (run_dir / "trials" / "t01" / "log.txt").read_text()
    assert (
        "(CUDA_VISIBLE_DEVICES=0)" in trial_log
    )  # the trainer saw the device it was leased (CPU torch here)
    metrics = json.loads((run_dir / "trials" / "t01" / "output" / "metrics.json").read_text())
    assert metrics["device"] == "cpu"  # torch here has no CUDA: the same code path, on CPU


def test_gpu_trials_under_docker_need_the_gpu_image_and_say_how_to_build_it() -> None:
    from agent.run.config import RunConfig
    from agent.run.startup import gpu_image_opts
    from sandbox.images import TRAINER_GPU_IMAGE
    from sandbox.status import docker_status

    assert gpu_image_opts(RunConfig.model_validate({"trial_gpus": 0, "sandbox": "docker"})) == {}
    assert gpu_image_opts(RunConfig.model_validate({"trial_gpus": 1, "sandbox": "auto"})) == {
        "image": TRAINER_GPU_IMAGE
    }
    status = docker_status(TRAINER_GPU_IMAGE)
    if not status.engine_reachable or status.image_present:
        pytest.skip(f"needs a docker engine without {TRAINER_GPU_IMAGE}: {status.summary()}")
    with pytest.raises(
        ValueError, match=r"needs the GPU trainer image .*`rlloop sandbox build --gpu --online`"
    ):
        gpu_image_opts(RunConfig.model_validate({"trial_gpus": 1, "sandbox": "docker"}))
