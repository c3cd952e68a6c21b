"""Scoring a model on a benchmark: batched generation, stop strings, per-sample scores and a bootstrap CI.

Generation is batched with LEFT padding and the KV cache, prompts sorted by length so batches waste little padding,
and every sequence stops at EOS or at one of the benchmark's stop strings (a batch ends as soon as all of its
sequences have stopped). Decoding settings come only from `EvalConfig`, never from a checkpoint's
generation_config.json. vLLM serves the same interface when it is importable and a GPU is present.
"""

from __future__ import annotations

import importlib.util
import logging
import random
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import torch
from pydantic import BaseModel, Field

from grader.benchmarks.base import Benchmark, MultiTurnBenchmark, PromptFormatting, Sample
from grader.config import EvalConfig
from grader.stats import bootstrap_ci

log = logging.getLogger(__name__)


class EvalResult(BaseModel):
    """The outcome of one evaluation. `scores[i]` belongs to `sample_ids[i]`, in the order samples were given."""

    score: float
    n: int
    ci_low: float
    ci_high: float
    seconds: float
    config_hash: str
    engine: str
    sample_ids: list[str] = Field(default_factory=list)
    scores: list[float] = Field(default_factory=list)
    turns: list[int] = Field(default_factory=list)  # multi-turn games only: replies per game

    @property
    def samples_per_second(self) -> float:
        return self.n / self.seconds if self.seconds > 0 else float("inf")

    def correct_by_id(self) -> dict[str, float]:
        return dict(zip(self.sample_ids, self.scores, strict=True))


def cut_at_stop(text: str, stop: Sequence[str]) -> str:
    """The completion up to (not including) the earliest stop string."""
    cut = len(text)
    for s in stop:
        at = text.find(s) if s else -1
        if at != -1:
            cut = min(cut, at)
    return text[:cut]


def pick_exemplars(train: Sequence[Sample], k: int, seed: int, exclude_prompts: set[str]) -> list[Sample]:
    """`k` few-shot exemplars from the train split, chosen by seed; none shares a prompt with the evaluated set."""
    if k == 0:
        return []
    pool = [s for s in train if s.prompt not in exclude_prompts]
    if len(pool) < k:
        raise ValueError(
            f"few_shot={k} but the train split has only {len(pool)} usable exemplars; lower few_shot"
        )
    return random.Random(seed).sample(pool, k)


def build_prompts(benchmark: Benchmark, samples: Sequence[Sample], config: EvalConfig) -> list[str]:
    """The prompts the model sees under `config`'s prompt format and few-shot count."""
    formats = list(getattr(benchmark, "prompt_formats", ["default"]))
    if config.prompt_format not in formats:
        raise ValueError(
            f"benchmark {benchmark.name!r} has no prompt format {config.prompt_format!r}; choose one of {formats}"
        )
    exemplars: list[Sample] = []
    if config.few_shot:
        exemplars = pick_exemplars(
            benchmark.load("train"), config.few_shot, config.seed, exclude_prompts={s.prompt for s in samples}
        )
    if isinstance(benchmark, PromptFormatting):
        return [benchmark.format_prompt(s, config.prompt_format, exemplars) for s in samples]
    prefix = "".join(f"{ex.prompt}{ex.answer}\n" for ex in exemplars)
    return [prefix + s.prompt for s in samples]


class GenerationEngine(Protocol):
    """Turns prompts into completions (text after the prompt, not yet cut at stop strings)."""

    name: str

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: EvalConfig
    ) -> list[str]:
        """One completion per prompt, in order."""
        ...


class _StopStrings:
    """Marks a sequence finished once its generated tail contains a stop string; generate() ends when all are."""

    def __init__(self, tokenizer: Any, stop: list[str], prompt_width: int) -> None:
        self.tokenizer = tokenizer
        self.stop = [s for s in stop if s]
        self.prompt_width = prompt_width
        # Every non-special token decodes to >= 1 character, so a stop string completed at this step lies
        # within its last len(stop) tokens; a small margin covers tokenizer quirks.
        self.window = max((len(s) for s in self.stop), default=0) + 2

    def __call__(self, input_ids: torch.LongTensor, scores: Any, **kwargs: Any) -> torch.BoolTensor:
        new = input_ids[:, self.prompt_width :]
        if not self.stop or new.shape[1] == 0:
            return torch.zeros(input_ids.shape[0], dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]
        tails = self.tokenizer.batch_decode(new[:, -self.window :], skip_special_tokens=True)
        done = [any(s in t for s in self.stop) for t in tails]
        return torch.tensor(done, dtype=torch.bool, device=input_ids.device)  # type: ignore[return-value]


class HFEngine:
    """transformers generation: left padding, KV cache, length-sorted batches, early exit on stop strings."""

    name = "hf"

    def __init__(self, model: Any, tokenizer: Any) -> None:
        self.model = model
        self.tokenizer = tokenizer

    def _generation_config(self, max_new_tokens: int, config: EvalConfig) -> Any:
        from transformers import GenerationConfig

        tok = self.tokenizer
        settings: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": config.do_sample,
            "use_cache": True,
            "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            "eos_token_id": tok.eos_token_id,
            "bos_token_id": tok.bos_token_id,
        }
        if config.do_sample:
            settings.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
        return GenerationConfig(**settings)

    @torch.inference_mode()
    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: EvalConfig
    ) -> list[str]:
        from transformers import StoppingCriteriaList

        tok = self.tokenizer
        previous_side = tok.padding_side
        tok.padding_side = "left"
        if tok.pad_token_id is None:
            tok.pad_token = tok.eos_token
        gen_config = self._generation_config(max_new_tokens, config)
        self.model.generation_config = gen_config  # a checkpoint's own generation settings never apply
        self.model.eval()
        device = next(self.model.parameters()).device
        lengths = [len(ids) for ids in tok(prompts, add_special_tokens=True)["input_ids"]]
        order = sorted(range(len(prompts)), key=lambda i: -lengths[i])  # longest first: memory peaks early
        out: list[str] = [""] * len(prompts)
        try:
            for start in range(0, len(order), config.batch_size):
                batch = order[start : start + config.batch_size]
                enc = tok([prompts[i] for i in batch], return_tensors="pt", padding=True).to(device)
                width = enc["input_ids"].shape[1]
                generated = self.model.generate(
                    **enc,
                    generation_config=gen_config,
                    stopping_criteria=StoppingCriteriaList([_StopStrings(tok, stop, width)]),
                )
                texts = tok.batch_decode(generated[:, width:], skip_special_tokens=True)
                for i, text in zip(batch, texts, strict=True):
                    out[i] = text
        finally:
            tok.padding_side = previous_side
        return out


def vllm_available() -> bool:
    """vLLM is used only with a GPU; on CPU it is never imported."""
    return torch.cuda.is_available() and importlib.util.find_spec("vllm") is not None


class VLLMEngine:
    """vLLM generation (GPU only); stop strings and sampling are handled by vLLM's SamplingParams."""

    name = "vllm"

    def __init__(self, model_path: Path, tokenizer_path: Path, seed: int = 0) -> None:
        from vllm import LLM

        self.llm = LLM(
            model=str(model_path),
            tokenizer=str(tokenizer_path),
            trust_remote_code=False,
            seed=seed,
            dtype="auto",
            gpu_memory_utilization=0.85,
            enforce_eager=True,
        )

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: EvalConfig
    ) -> list[str]:
        from vllm import SamplingParams

        params = SamplingParams(
            temperature=config.temperature,
            top_p=config.top_p,
            max_tokens=max_new_tokens,
            stop=[s for s in stop if s] or None,
            seed=config.seed,
        )
        outputs = self.llm.generate(prompts, params, use_tqdm=False)
        return [o.outputs[0].text for o in outputs]

    def close(self) -> None:
        """Release the GPU memory vLLM holds, so the next submission's engine fits."""
        import gc

        del self.llm
        gc.collect()
        torch.cuda.empty_cache()


def select_samples(samples: Sequence[Sample], config: EvalConfig) -> list[Sample]:
    """The samples an evaluation covers: the first `limit` of them, or all."""
    chosen = list(samples[: config.limit] if config.limit else samples)
    if not chosen:
        raise ValueError("no samples to evaluate; pass a non-empty split")
    return chosen


def play_games(
    engine: GenerationEngine, samples: Sequence[Sample], benchmark: MultiTurnBenchmark, config: EvalConfig
) -> tuple[list[float], list[int]]:
    """Play every sample's game to the end; each turn is ONE batched generate call over the games still running.

    Returns (1.0 per won game else 0.0, replies per game), in sample order.
    """
    if config.few_shot:
        raise ValueError(
            f"{benchmark.name} is a multi-turn game: few-shot prompting is not supported; use few_shot=0"
        )
    if config.prompt_format not in benchmark.prompt_formats:
        raise ValueError(
            f"benchmark {benchmark.name!r} has no prompt format {config.prompt_format!r}; "
            f"choose one of {list(benchmark.prompt_formats)}"
        )
    games = [benchmark.start_game(sample) for sample in samples]
    budget, stop = benchmark.turn_budget(config.prompt_format)
    max_new = config.max_new_tokens or budget
    for _ in range(benchmark.max_turns):
        playing = [game for game in games if not game.done]
        if not playing:
            break
        prompts = [game.prompt(config.prompt_format) for game in playing]
        replies = engine.generate(prompts, max_new_tokens=max_new, stop=stop, config=config)
        for game, reply in zip(playing, replies, strict=True):
            game.step(cut_at_stop(reply, stop))
    return [1.0 if game.success() else 0.0 for game in games], [game.turns for game in games]


def run_evaluation(
    engine: GenerationEngine, samples: Sequence[Sample], benchmark: Benchmark, config: EvalConfig
) -> EvalResult:
    """Generate with `engine`, cut at stop strings, score each sample, and summarise with a bootstrap CI.

    Multi-turn benchmarks are played instead (`play_games`): the score is the success rate over their games.
    """
    chosen = select_samples(samples, config)
    torch.manual_seed(config.seed)
    start = time.perf_counter()
    turns: list[int] = []
    if isinstance(benchmark, MultiTurnBenchmark):
        scores, turns = play_games(engine, chosen, benchmark, config)
    else:
        prompts = build_prompts(benchmark, chosen, config)
        max_new = config.max_new_tokens or benchmark.max_new_tokens
        completions = engine.generate(
            prompts, max_new_tokens=max_new, stop=list(benchmark.stop), config=config
        )
        scores = [
            float(benchmark.score(cut_at_stop(text, benchmark.stop), sample))
            for text, sample in zip(completions, chosen, strict=True)
        ]
    seconds = time.perf_counter() - start
    low, high = bootstrap_ci(scores, resamples=config.bootstrap_resamples, seed=config.seed)
    return EvalResult(
        score=sum(scores) / len(scores),
        n=len(scores),
        ci_low=low,
        ci_high=high,
        seconds=seconds,
        config_hash=config.identity(),
        engine=engine.name,
        sample_ids=[s.id for s in chosen],
        scores=scores,
        turns=turns,
    )


def evaluate_model(
    model: Any, tokenizer: Any, samples: Sequence[Sample], benchmark: Benchmark, config: EvalConfig
) -> EvalResult:
    """Evaluate an already-loaded transformers model (the grader loads checkpoints itself, safely)."""
    return run_evaluation(HFEngine(model, tokenizer), samples, benchmark, config)


def use_vllm(config: EvalConfig, model_path: Path) -> bool:
    """Whether `config` and this machine call for vLLM (GPU + vllm installed + safetensors weights)."""
    if config.engine == "hf":
        return False
    has_safetensors = any(Path(model_path).glob("*.safetensors"))
    if config.engine == "vllm" and not vllm_available():
        raise ValueError("engine='vllm' needs the vllm package and a GPU; use engine='auto' or 'hf'")
    return vllm_available() and has_safetensors


def evaluate(
    model_path: Path,
    samples: Sequence[Sample],
    benchmark: Benchmark,
    config: EvalConfig | None = None,
    *,
    tokenizer_path: Path | None = None,
) -> EvalResult:
    """Score the checkpoint at `model_path` on `samples` (loaded safely: no remote code, no pickles)."""
    from transformers import AutoTokenizer

    from grader.checkpoint import load_model

    config = config or EvalConfig()
    tokenizer_path = Path(tokenizer_path or model_path)
    if use_vllm(config, Path(model_path)):
        engine = VLLMEngine(Path(model_path), tokenizer_path, config.seed)
        try:
            return run_evaluation(engine, samples, benchmark, config)
        finally:
            engine.close()
    tokenizer = AutoTokenizer.from_pretrained(str(tokenizer_path), trust_remote_code=False)
    model = load_model(Path(model_path))
    if torch.cuda.is_available():
        model = model.to("cuda")
    return evaluate_model(model, tokenizer, samples, benchmark, config)
