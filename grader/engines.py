"""Generation engines: how the grader turns prompts into completions. One registry (`ENGINES`, plugins through the
`rlloop.engines` entry point group), one interface (`GenerationEngine`), and `choose_engine`, the one place that
reads `EvalConfig.engine`: a name, or "auto" for the most capable engine this machine can run.

An `EngineSpec` opens an engine from a model the grader has already loaded and checked (`from_model`, given a
private scratch folder for engines that need the weights on disk) and, optionally, straight from a checkpoint folder
(`from_path`, returning None when it cannot read that folder).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from grader.config import EvalConfig
from tasks.plugins import Registry


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


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: what it needs, whether this machine has it, and how to open it."""

    name: str
    requirement: str  # shown when the engine is asked for by name and unavailable
    available: Callable[[], bool]
    from_model: Callable[
        [Any, Any, Path, EvalConfig], GenerationEngine
    ]  # (model, tokenizer, scratch, config)
    from_path: Callable[[Path, Path, EvalConfig], GenerationEngine | None] | None = None
    preference: int = 0  # "auto" takes the available engine with the highest preference


def _hf_from_model(model: Any, tokenizer: Any, scratch: Path, config: EvalConfig) -> GenerationEngine:
    if torch.cuda.is_available():
        model = model.to("cuda")
    return HFEngine(model, tokenizer)


def _vllm_from_model(model: Any, tokenizer: Any, scratch: Path, config: EvalConfig) -> GenerationEngine:
    """vLLM reads weights from disk: a clean safetensors copy of the checked model, in the grader's scratch."""
    model.save_pretrained(scratch, safe_serialization=True)
    tokenizer.save_pretrained(scratch)
    return VLLMEngine(scratch, scratch, config.seed)


def _vllm_from_path(model_path: Path, tokenizer_path: Path, config: EvalConfig) -> GenerationEngine | None:
    if not any(model_path.glob("*.safetensors")):
        return None  # pickled weights: load them safely through transformers and re-save (from_model)
    return VLLMEngine(model_path, tokenizer_path, config.seed)


def _register_builtins() -> None:
    ENGINES.register(
        "hf", EngineSpec("hf", "transformers (always installed)", lambda: True, _hf_from_model, preference=0)
    )
    ENGINES.register(
        "vllm",
        EngineSpec(
            "vllm",
            "the vllm package and a GPU (pip install 'rlloop[gpu]')",
            vllm_available,
            _vllm_from_model,
            _vllm_from_path,
            preference=10,
        ),
    )


ENGINES: Registry[EngineSpec] = Registry(
    "engine", "rlloop.engines", builtins=_register_builtins, reserved=("auto",), hint="hf, vllm or a plugin"
)


def choose_engine(config: EvalConfig) -> EngineSpec:
    """The engine `config.engine` names; "auto" is the most preferred one available. An engine named but
    unavailable here is an error that says what it needs, never a silent fallback (scores must say what made them)."""
    if config.engine == "auto":
        usable = [ENGINES.get(name) for name in ENGINES.names()]
        return max((s for s in usable if s.available()), key=lambda s: s.preference)
    spec = ENGINES.get(config.engine)
    if not spec.available():
        raise ValueError(f"engine={spec.name!r} needs {spec.requirement}; use engine='auto' or 'hf'")
    return spec


def close_engine(engine: GenerationEngine) -> None:
    """Release what an engine holds (vLLM's GPU memory) so the next submission's engine fits."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()
