"""Every recipe takes a step on a real pretrained model: SmolLM2-135M-Instruct (fetched from the package index,
dequantized), in its chat template, at the defaults that fit it (trainers/model_fit.py), SFT with LoRA too; each run
saves a checkpoint the grader's loader reads.

Heavy on two cores (a 135M model loaded once per recipe): run with `make test-real-model`
(RLLOOP_REAL_MODEL_TESTS=1); skipped otherwise. The default suite's real-model check is the fetch and conversion
(tests/agent/run/test_packaged.py, marked slow).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import build_once
from tests.trainers.conftest import REPO, write_jsonl
from trainers.model_fit import fit_for

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        os.environ.get("RLLOOP_REAL_MODEL_TESTS") != "1",
        reason="the real model's recipe steps run with make test-real-model (RLLOOP_REAL_MODEL_TESTS=1)",
    ),
]
# coach needs an OpenAI-compatible endpoint (tested against a local one in test_algorithms_coach.py)
RECIPES = ("sft", "dpo", "grpo", "opo", "rft", "opcd", "opcd_offpolicy", "gad", "oel")


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent.run.models import build_builtin

    return build_once(
        tmp_path_factory, "smollm2-135m-instruct", lambda p: build_builtin("smollm2-135m-instruct", p)
    )


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", "train", 400)


@pytest.mark.parametrize("recipe", [*RECIPES, "sft-lora"])
def test_a_recipe_takes_a_step_on_the_real_model(
    recipe: str, smollm2: Path, rows: Path, tmp_path: Path
) -> None:
    name, lora = (recipe.removesuffix("-lora"), recipe.endswith("-lora"))
    config = {
        **fit_for(smollm2).defaults(name),
        "model_path": str(smollm2),
        "train_file": str(rows),
        "output_dir": str(tmp_path / "out"),
        "benchmark": "arith",
        "prompt_format": "chat",
        "max_steps": 1,
        "save_optimizer_max_mb": 0,
        **({"lora": True} if lora else {}),
    }
    (tmp_path / "config.json").write_text(json.dumps(config))
    done = subprocess.run(  # every core, as a trial alone on the machine has them (torch_threads None)
        [sys.executable, "-m", "trainers", name, "--config", str(tmp_path / "config.json")],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["steps"] >= 1 or metrics.get("rounds", 0) >= 1, metrics
    from grader.checkpoint import load_model

    model = load_model(tmp_path / "out")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
