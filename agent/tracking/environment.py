"""What a run's numbers depend on besides its config: library versions, thread counts, the machine.

The same seed gives the same weights only under the same libraries and kernels, so every run records them (run.json's
`environment`, the MLflow parent's `env.*` params): two runs whose scores differ can be told apart by a diff of this
record before anyone suspects the recipe.
"""

from __future__ import annotations

import os
import platform
import sys
from importlib import metadata

# The libraries that decide what a trial computes (kernels, tokenisation, training loop) and how a run is driven.
PACKAGES: tuple[str, ...] = (
    "torch",
    "transformers",
    "trl",
    "tokenizers",
    "accelerate",
    "peft",
    "datasets",
    "safetensors",
    "numpy",
    "mlflow",
    "rlloop",
)
# Environment variables that change thread counts or hashing, and so can change numbers.
ENV_VARS: tuple[str, ...] = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "PYTHONHASHSEED", "CUDA_VISIBLE_DEVICES")


def package_versions(names: tuple[str, ...] = PACKAGES) -> dict[str, str | None]:
    """Installed version of each package (None when it is not installed), read without importing it."""
    versions: dict[str, str | None] = {}
    for name in names:
        try:
            versions[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            versions[name] = None
    return versions


def cpu_model() -> str:
    """The CPU's model name (Linux's /proc/cpuinfo; `platform.processor()` elsewhere)."""
    try:
        with open("/proc/cpuinfo") as fh:
            for line in fh:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor()


def torch_record() -> dict[str, object]:
    """Torch's thread pools and devices as this process sees them (empty when torch is not installed)."""
    try:
        import torch
    except ImportError:  # pragma: no cover - torch is a dependency
        return {}
    return {
        "torch_threads": torch.get_num_threads(),
        "torch_interop_threads": torch.get_num_interop_threads(),
        # The instruction set torch picked its CPU kernels for (AVX2, AVX512, ...): different kernels round differently.
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cuda_available": torch.cuda.is_available(),
        "cuda_version": torch.version.cuda,
        "cuda_device_count": torch.cuda.device_count() if torch.cuda.is_available() else 0,
    }


def environment_record() -> dict[str, object]:
    """The run's environment: python, platform, cpu count, package versions, torch threads and CUDA."""
    return {
        "python": platform.python_version(),
        "python_implementation": platform.python_implementation(),
        "platform": platform.platform(),
        "machine": platform.machine(),
        "cpu_count": os.cpu_count(),
        "cpu_model": cpu_model(),
        "packages": package_versions(),
        **torch_record(),
        "env": {name: os.environ.get(name) for name in ENV_VARS},
        "executable": sys.executable,
    }


def flat_params(record: dict[str, object], prefix: str = "env.") -> dict[str, str]:
    """The record as flat `env.*` strings for MLflow params (`env.packages.torch`, `env.torch_threads`, ...)."""
    out: dict[str, str] = {}
    for key, value in record.items():
        if isinstance(value, dict):
            out.update(flat_params(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = str(value)
    return out
