"""benchmarks/gpu_check.py --dry-run: the GPU check's whole path (model build, SFT/GRPO/OPO timing, every recipe's
step, the grading server, an end-to-end `rlloop run`) on CPU, with TRL and vLLM made unimportable as on the GPU
machine it is written for. Every figure line must appear, and only the figures that cannot exist here are n/a."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FIGURES = (
    "torch",
    "cuda_version",
    "gpu_driver",
    "cuda_available",
    "device_name",
    "bf16_peak_tflops",
    "trl_installed",
    "vllm_installed",
    "train_placement",
    "model_params",
    "model_build_s",
    "sft_tokens_per_s",
    "sft_mfu",
    "sft_peak_memory_gb",
    *(
        f"{kind}_{name}"
        for kind in ("grpo", "opo")
        for name in ("tokens_per_s", "generate_tokens_per_s", "mfu", "step_s")
    ),
    *(
        f"recipe_{r}_device"
        for r in ("coach", "dpo", "gad", "grpo", "oel", "opcd", "opcd_offpolicy", "opo", "rft", "sft")
    ),
    "grade_gpu",
    "grade_baseline_s",
    "grade_baseline_score",
    "grade_submit_s",
    "grade_score",
    "e2e_sandbox",
    "e2e_wall_s",
    "e2e_trial_status",
    "e2e_baseline_score",
    "e2e_trial_score",
    "e2e_trial_valid",
    "e2e_trial_train_s",
    "e2e_trial_wall_s",
    "e2e_trial_device",
    "total_s",
    "missing_packages",
    "failed",
)
# What cannot have a value on this CPU machine without TRL: the bf16 peak and MFU (no GPU), the recipes built on TRL,
# and coach (it needs an LLM endpoint).
EXPECTED_NA = {
    "bf16_peak_tflops",
    "sft_mfu",
    "grpo_mfu",
    "opo_mfu",
    *(f"recipe_{r}_device" for r in ("sft", "dpo", "grpo", "coach")),
}


@pytest.mark.slow
def test_the_dry_run_prints_every_figure_without_trl(tmp_path: Path) -> None:
    blocked = tmp_path / "blocked"
    for module in ("trl", "vllm"):
        (blocked / module).mkdir(parents=True)
        (blocked / module / "__init__.py").write_text(
            f"raise ImportError('{module} is not installed on the GPU machine')\n"
        )
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(blocked), str(REPO)]), "OMP_NUM_THREADS": "1"}
    done = subprocess.run(
        [
            sys.executable,
            str(REPO / "benchmarks" / "gpu_check.py"),
            "--dry-run",
            "--work",
            str(tmp_path / "work"),
        ],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout + done.stderr[-3000:]
    lines = [line for line in done.stdout.splitlines() if not line.startswith("[trainers]")]
    values = {line.split(" ", 1)[0]: line.split(" ", 1)[1] for line in lines if " " in line}
    assert set(FIGURES) <= set(values), sorted(set(FIGURES) - set(values))
    not_available = {name for name, value in values.items() if value.startswith("n/a")}
    assert not_available == EXPECTED_NA, done.stdout
    assert values["trl_installed"] == "0" and values["failed"] == values["missing_packages"] == "none"
    assert int(values["model_params"]) > 0 and float(values["sft_tokens_per_s"]) > 0
    assert values["e2e_trial_status"] == "succeeded" and values["e2e_trial_device"] == "cpu/float32"
    for recipe in ("gad", "oel", "opcd", "opcd_offpolicy", "opo", "rft"):
        assert values[f"recipe_{recipe}_device"] == "cpu/float32"
