"""grader.evaluation on a tiny random Llama: batching, stop strings, few-shot prompts, decoding settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from transformers import AutoTokenizer

from grader.benchmarks import get_benchmark
from grader.checkpoint import load_model
from grader.config import EvalConfig
from grader.evaluation import HFEngine, build_prompts, cut_at_stop, evaluate
from trainers.tiny import _CHARS

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _one_thread() -> None:
    torch.set_num_threads(1)


def test_evaluate_returns_scores_ci_and_identity(tiny_base: Path) -> None:
    bench = get_benchmark("arith")
    config = EvalConfig(limit=30, batch_size=8)
    result = evaluate(tiny_base, bench.load("test"), bench, config)
    assert result.n == 30 and len(result.scores) == 30
    assert result.sample_ids == [s.id for s in bench.load("test")[:30]]
    assert result.score == pytest.approx(sum(result.scores) / 30)
    assert result.ci_low <= result.score <= result.ci_high
    assert result.config_hash == config.identity() and result.engine == "hf" and result.seconds > 0
    again = evaluate(tiny_base, bench.load("test"), bench, config)
    assert again.scores == result.scores


def test_batched_left_padding_matches_one_by_one(tiny_base: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    engine = HFEngine(load_model(tiny_base), tokenizer)
    prompts = ["1+2=", "37+58=", "99-1=", "5=", "12+12+12+12=", "0-0="]
    kwargs = {"max_new_tokens": 8, "stop": [], "config": EvalConfig()}
    batched = engine.generate(prompts, **kwargs)  # type: ignore[arg-type]
    single = engine.generate(prompts, **{**kwargs, "config": EvalConfig(batch_size=1)})  # type: ignore[arg-type]
    assert batched == single
    assert tokenizer.padding_side == "right"  # restored


def test_stop_strings_end_generation_early(tiny_base: Path) -> None:
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    engine = HFEngine(load_model(tiny_base), tokenizer)
    prompts = ["1+2=", "37+58="]
    free = engine.generate(prompts, max_new_tokens=30, stop=[], config=EvalConfig())
    stopped = engine.generate(prompts, max_new_tokens=30, stop=list(_CHARS), config=EvalConfig())
    assert max(len(t) for t in free) > 3
    assert all(len(t) <= 1 for t in stopped)  # every character is a stop string: one token, then done
    assert cut_at_stop("12\n34 5", ["\n", " "]) == "12"
    assert cut_at_stop("abc", []) == "abc"


def test_checkpoint_generation_config_is_ignored(tiny_base: Path, tmp_path: Path) -> None:
    import shutil

    tampered = Path(shutil.copytree(tiny_base, tmp_path / "tampered"))
    (tampered / "generation_config.json").write_text(
        json.dumps({"do_sample": True, "temperature": 5.0, "max_new_tokens": 1, "suppress_tokens": [4, 5, 6]})
    )
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_base))
    prompts = ["1+2=", "37+58="]
    args = {"max_new_tokens": 6, "stop": [], "config": EvalConfig()}
    clean = HFEngine(load_model(tiny_base), tokenizer).generate(prompts, **args)  # type: ignore[arg-type]
    dirty = HFEngine(load_model(tampered), tokenizer).generate(prompts, **args)  # type: ignore[arg-type]
    assert clean == dirty


def test_few_shot_exemplars_come_from_train_only() -> None:
    bench = get_benchmark("arith")
    test = bench.load("test")[:5]
    train_prompts = {s.prompt for s in bench.load("train")}
    test_prompts = {s.prompt for s in bench.load("test")}
    prompts = build_prompts(bench, test, EvalConfig(few_shot=3, seed=4))
    shots = prompts[0].split("\n")[:3]
    assert len(shots) == 3 and all(line.split("=")[0] + "=" in train_prompts for line in shots)
    assert not any(line.split("=")[0] + "=" in test_prompts for line in shots)
    assert all(p.endswith(s.prompt) for p, s in zip(prompts, test, strict=True))
    assert build_prompts(bench, test, EvalConfig(few_shot=3, seed=4)) == prompts  # seeded
    with pytest.raises(ValueError, match="no prompt format"):
        build_prompts(bench, test, EvalConfig(prompt_format="cot"))


def test_sampling_is_seeded(tiny_base: Path) -> None:
    bench = get_benchmark("arith")
    config = EvalConfig(limit=12, temperature=1.0, seed=5)
    a = evaluate(tiny_base, bench.load("test"), bench, config)
    b = evaluate(tiny_base, bench.load("test"), bench, config)
    assert a.scores == b.scores and a.config_hash != EvalConfig(limit=12).identity()
