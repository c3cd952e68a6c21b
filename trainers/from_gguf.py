"""A GGUF file (llama.cpp's format, the one many users' tools write) made into an ordinary Hugging Face folder.

transformers reads a GGUF itself (`from_pretrained(folder, gguf_file=...)`, with the `gguf` package): it builds the
tokenizer and chat template from the file's metadata and dequantizes every tensor to float. The model it returns is
marked as quantized with gguf, and `save_pretrained` refuses it ("not serializable"). So its weights are copied into
a model made from its config with the quantization config removed, every key matched, and that one is saved: config.json
without `quantization_config`, model.safetensors (float32: a Q4_1 value is a 4-bit integer times an fp16 scale plus an
fp16 minimum, exact in float32 and not in bfloat16), the tokenizer with its chat template, generation_config.json.
Every rlloop path (trials, the grader, validation, vLLM's loader) then loads the folder as it loads any other.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tasks.atomic import atomic_folder

SOURCE_FILE = (
    "rlloop_source.json"  # where the folder came from (agent.run.models writes the same name for hub ids)
)


class GGUFConversionError(RuntimeError):
    """The GGUF file cannot be made into a Hugging Face folder; the message says why and what to do."""


def _require_gguf() -> None:
    try:
        import gguf  # noqa: F401
    except ImportError:
        raise GGUFConversionError(
            "reading a GGUF file needs the `gguf` package (a dependency of rlloop): pip install 'gguf>=0.10'"
        ) from None


def convert_gguf(
    gguf_file: Path,
    out_dir: Path,
    *,
    source: dict[str, Any],
    say: Callable[[str], None] | None = None,
) -> Path:
    """Dequantize `gguf_file` into the Hugging Face folder `out_dir` (made whole or not at all), with `source` (where
    the file came from, what its weights are) in its rlloop_source.json. Returns `out_dir`."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer, GenerationConfig

    _require_gguf()
    say = say or (lambda _message: None)
    gguf_file = Path(gguf_file)
    folder, name = str(gguf_file.parent), gguf_file.name
    started = time.monotonic()
    say(f"reading {name}: tokenizer and chat template")
    tokenizer = AutoTokenizer.from_pretrained(folder, gguf_file=name)
    say(f"dequantizing {name} to float32 (a minute or two on two cores)")
    loaded = AutoModelForCausalLM.from_pretrained(folder, gguf_file=name, dtype=torch.float32)
    config = loaded.config
    if hasattr(config, "quantization_config"):
        del config.quantization_config
    model = AutoModelForCausalLM.from_config(config, dtype=torch.float32)
    weights = loaded.state_dict()
    missing, unexpected = model.load_state_dict(weights, strict=False)
    tied = set(getattr(model, "_tied_weights_keys", None) or ())
    missing = [key for key in missing if key not in tied]
    if missing or unexpected:
        raise GGUFConversionError(
            f"{name}: the dequantized weights do not fit the model its config describes (missing {missing[:5]}, "
            f"unexpected {unexpected[:5]}); this transformers version cannot convert it"
        )
    model.tie_weights()
    del loaded, weights
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id,
    )
    parameters = sum(p.numel() for p in model.parameters())
    with atomic_folder(out_dir) as staging:
        model.save_pretrained(staging, safe_serialization=True)
        tokenizer.save_pretrained(staging)
        about = {
            **source,
            "gguf_file": name,
            "parameters": parameters,
            "architecture": type(model).__name__,
            "converted_by": "trainers.from_gguf.convert_gguf (transformers + gguf, weights copied into a model "
            "made from the file's config)",
            "convert_seconds": round(time.monotonic() - started, 1),
        }
        (staging / SOURCE_FILE).write_text(json.dumps(about, indent=2) + "\n")
        saved = json.loads((staging / "config.json").read_text())
        if "quantization_config" in saved:  # every rlloop path would load it as quantized: never hand it on
            raise GGUFConversionError(f"{name}: the saved config.json still holds a quantization_config")
    say(f"converted: {parameters / 1e6:.1f}M parameters in {time.monotonic() - started:.0f} s")
    return Path(out_dir)
