"""Safe handling of submitted checkpoints: where they may live, what they may contain, how they are loaded.

A submission is untrusted input. Its folder must lie inside an allowed root (judged on the path as sent, nothing
followed) and is copied into the grader's private folder first (`snapshot_submission`: no link followed at any
depth, regular files only, under the size and file-count limits, with a digest of every byte); only that copy is
inspected, hashed and loaded, so nothing the submitter still holds can change what is scored. It must stay under
size and file-count limits, carry no remote code (`auto_map`), and match the base
model's architecture and tokenizer vocabulary. Weights are read from safetensors, or from torch files with
`weights_only=True`; `trust_remote_code` is never set. LoRA adapters are merged onto the grader's own base model.
Error messages name the problem and the offending file, never file contents. A submission that ships a chat
template other than the base model's is not refused but flagged (`chat_template_flag`): prompts are always rendered
with the base model's template, and a flagged submission can never become the run's best.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import torch

from grader.config import CheckpointLimits
from sandbox import untrusted

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "vocab.json", "tokenizer.model", "vocab.txt")
CHAT_TEMPLATE_FILES = ("chat_template.jinja", "chat_template.json", "tokenizer_config.json")
ADAPTER_WEIGHTS = ("adapter_model.safetensors", "adapter_model.bin")
MAX_JSON_BYTES = 4 * 1024 * 1024
# Adapter settings that change the merged weights; everything else in adapter_config.json is bookkeeping.
_ADAPTER_IDENTITY_KEYS = (
    "peft_type",
    "r",
    "lora_alpha",
    "target_modules",
    "use_rslora",
    "use_dora",
    "fan_in_fan_out",
    "bias",
    "modules_to_save",
    "rank_pattern",
    "alpha_pattern",
)


class CheckpointError(ValueError):
    """A submission the grader refuses; the message is safe to return to the client."""


@dataclass(frozen=True)
class CheckpointInfo:
    """What inspection found: the folder, its kind and its weight files."""

    path: Path
    kind: Literal["full", "adapter"]
    weight_files: tuple[Path, ...]
    config: dict[str, Any] = field(default_factory=dict)
    chat_template_sha256: str | None = None  # of the chat template the submission ships, if any


def locate_submission(raw_path: str, allowed_roots: list[Path]) -> tuple[Path, str]:
    """(allowed root, path below it) of `raw_path`, which must be absolute and lie inside one of `allowed_roots`,
    judged on the path as written (`..` collapsed): nothing is looked up or followed here (see snapshot)."""
    if not raw_path or "\x00" in raw_path:
        raise CheckpointError(
            "model_path is empty or contains a NUL byte; send the checkpoint folder's absolute path"
        )
    candidate = Path(raw_path)
    if not candidate.is_absolute():
        raise CheckpointError("model_path must be absolute; send the checkpoint folder's absolute path")
    path = Path(os.path.normpath(candidate))
    for root in allowed_roots:
        for spelling in dict.fromkeys((Path(os.path.abspath(root)), root.resolve())):
            if spelling in path.parents:
                return spelling, path.relative_to(spelling).as_posix()
    raise CheckpointError(
        "model_path lies outside the allowed submission root; submit a checkpoint inside the workspace"
    )


def snapshot_submission(root: Path, relative: str, dest: Path, limits: CheckpointLimits) -> str:
    """Copy the submitted folder into `dest` (new, private to the grader) without following any link, and return
    the digest of its files (`sandbox.untrusted.tree_digest`). A link, FIFO, device or socket anywhere in it, or a
    folder past the limits, is refused with the reason; nothing is left in `dest` then."""
    try:
        return untrusted.snapshot(
            root,
            relative,
            dest,
            limits=untrusted.TreeLimits(max_files=limits.max_files, max_total_bytes=limits.max_total_bytes),
        )
    except FileNotFoundError:
        shutil.rmtree(dest, ignore_errors=True)
        raise CheckpointError(
            "model_path does not exist; check the path the trial wrote its checkpoint to"
        ) from None
    except untrusted.UntrustedPathError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise CheckpointError(f"checkpoint refused: {_below(exc, root)}") from None
    except OSError as exc:
        shutil.rmtree(dest, ignore_errors=True)
        raise CheckpointError(f"checkpoint cannot be read ({exc.strerror or type(exc).__name__})") from None


def _below(exc: Exception, root: Path) -> str:
    """The refusal with the host's folder names cut to the part below the submission root."""
    return str(exc).replace(f"{root}/", "").replace(str(root), ".")


def _read_json(path: Path, what: str) -> dict[str, Any]:
    if path.stat().st_size > MAX_JSON_BYTES:
        raise CheckpointError(
            f"{path.name} is larger than {MAX_JSON_BYTES} bytes; {what} must be a small JSON file"
        )
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError):
        raise CheckpointError(
            f"{path.name} is not valid JSON; re-save the checkpoint with save_pretrained"
        ) from None
    if not isinstance(data, dict):
        raise CheckpointError(f"{path.name} must hold a JSON object")
    return data


def _refuse_remote_code(data: dict[str, Any], filename: str) -> None:
    if "auto_map" in data or data.get("trust_remote_code"):
        raise CheckpointError(
            f"{filename} asks for remote code (auto_map); the grader never runs code from a checkpoint, "
            "save the model with a built-in transformers architecture"
        )


def _list_files(folder: Path, limits: CheckpointLimits) -> list[Path]:
    """Every file under `folder`; symlinks must stay inside it. Enforces the size and file-count limits."""
    files: list[Path] = []
    total = 0
    for entry in sorted(folder.rglob("*")):
        real = entry.resolve()
        if real != folder and folder not in real.parents:
            raise CheckpointError(
                f"{entry.relative_to(folder)} is a symlink pointing outside the checkpoint folder; copy the file in"
            )
        if not real.is_file():
            continue
        files.append(entry)
        if len(files) > limits.max_files:
            raise CheckpointError(
                f"checkpoint has more than {limits.max_files} files; submit only config, weights and tokenizer"
            )
        total += real.stat().st_size
        if total > limits.max_total_bytes:
            raise CheckpointError(
                f"checkpoint is larger than {limits.max_total_bytes} bytes; submit a smaller model"
            )
    return files


def _weight_files(folder: Path, files: list[Path]) -> tuple[Path, ...]:
    top = [f for f in files if f.parent == folder]
    safetensors = [f for f in top if f.suffix == ".safetensors"]
    if safetensors:
        return tuple(sorted(safetensors))
    torch_files = [f for f in top if f.name.startswith("pytorch_model") and f.suffix == ".bin"]
    return tuple(sorted(torch_files))


def _tokenizer_vocab(folder: Path) -> dict[str, int]:
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(str(folder), trust_remote_code=False)
    except Exception as exc:  # noqa: BLE001 - any failure here is a bad tokenizer, reported by type only
        raise CheckpointError(
            f"tokenizer files cannot be loaded ({type(exc).__name__}); re-save the tokenizer"
        ) from None
    return dict(tokenizer.get_vocab())


@dataclass
class BaseModelReference:
    """The base model's identity, read once: architecture, vocab size and tokenizer vocabulary."""

    path: Path
    config: dict[str, Any]
    vocab: dict[str, int]
    chat_template_sha256: str | None = None

    @classmethod
    def read(cls, path: Path) -> BaseModelReference:
        config = _read_json(path / "config.json", "config.json")
        return cls(
            path=path,
            config=config,
            vocab=_tokenizer_vocab(path),
            chat_template_sha256=shipped_chat_template(path),
        )


def shipped_chat_template(folder: Path) -> str | None:
    """SHA-256 of the chat template a folder ships (chat_template.jinja, chat_template.json, or tokenizer_config's
    `chat_template`, in the order transformers reads them), or None when it ships none. Read as text only."""
    from tasks.chat import template_sha256

    jinja = folder / "chat_template.jinja"
    if jinja.is_file():
        if jinja.stat().st_size > MAX_JSON_BYTES:
            raise CheckpointError("chat_template.jinja is too large; keep the base model's template")
        return template_sha256(jinja.read_text(encoding="utf-8", errors="replace"))
    for name in ("chat_template.json", "tokenizer_config.json"):
        if (folder / name).is_file():
            template = _read_json(folder / name, name).get("chat_template")
            if isinstance(template, list):  # named templates: the default one is what prompts would use
                named = {t.get("name"): t.get("template") for t in template if isinstance(t, dict)}
                template = named.get("default")
            if isinstance(template, str) and template.strip():
                return template_sha256(template)
    return None


def chat_template_flag(info: CheckpointInfo, base: BaseModelReference) -> str | None:
    """Why a submission is flagged for its chat template (one it ships that is not the base's), or None."""
    if info.chat_template_sha256 is None or info.chat_template_sha256 == base.chat_template_sha256:
        return None
    return (
        f"the submission ships its own chat template (sha256 {info.chat_template_sha256[:12]}, base "
        f"{(base.chat_template_sha256 or 'none')[:12]}); it was ignored: prompts use the base model's template"
    )


def inspect_checkpoint(folder: Path, base: BaseModelReference, limits: CheckpointLimits) -> CheckpointInfo:
    """Check a resolved checkpoint folder without loading any weights; raises CheckpointError with the reason."""
    files = _list_files(folder, limits)
    names = {f.name for f in files if f.parent == folder}
    for name in ("tokenizer_config.json", "generation_config.json"):
        if name in names:
            _refuse_remote_code(_read_json(folder / name, name), name)
    if "adapter_config.json" in names and "config.json" not in names:
        adapter = _read_json(folder / "adapter_config.json", "adapter_config.json")
        _refuse_remote_code(adapter, "adapter_config.json")
        if str(adapter.get("peft_type", "")).upper() != "LORA":
            raise CheckpointError("adapter_config.json is not a LoRA adapter (peft_type must be LORA)")
        weights = tuple(folder / n for n in ADAPTER_WEIGHTS if n in names)[:1]
        if not weights:
            raise CheckpointError("adapter folder has no adapter_model.safetensors or adapter_model.bin")
        kind: Literal["full", "adapter"] = "adapter"
        config = adapter
    elif "config.json" in names:
        config = _read_json(folder / "config.json", "config.json")
        _refuse_remote_code(config, "config.json")
        for key in ("model_type", "architectures", "vocab_size"):
            if config.get(key) != base.config.get(key):
                raise CheckpointError(
                    f"config.json {key} differs from the base model's; submit a fine-tune of the base model"
                )
        weights = _weight_files(folder, files)
        if not weights:
            raise CheckpointError("checkpoint has no weights (*.safetensors or pytorch_model*.bin)")
        kind = "full"
    else:
        raise CheckpointError(
            "not a model folder: no config.json or adapter_config.json; save with save_pretrained"
        )
    if names & set(TOKENIZER_FILES) and _tokenizer_vocab(folder) != base.vocab:
        raise CheckpointError("tokenizer vocabulary differs from the base model's; keep the base tokenizer")
    return CheckpointInfo(
        path=folder,
        kind=kind,
        weight_files=weights,
        config=config,
        chat_template_sha256=shipped_chat_template(folder),
    )


def _tensor_bytes(tensor: torch.Tensor) -> bytes:
    flat = tensor.detach().to("cpu").contiguous().reshape(-1)
    return flat.view(torch.uint8).numpy().tobytes() if flat.numel() else b""


def _hash_tensors(digest: Any, tensors: dict[str, torch.Tensor]) -> None:
    for name in sorted(tensors):
        tensor = tensors[name]
        digest.update(f"{name}|{tensor.dtype}|{tuple(tensor.shape)}\n".encode())
        digest.update(_tensor_bytes(tensor))


def content_hash(info: CheckpointInfo) -> str:
    """Hash of the tensors (names, dtypes, shapes, values): equal for equal weights, whatever the files' mtimes."""
    from safetensors import safe_open

    digest = hashlib.sha256(f"kind={info.kind}\n".encode())
    # same weights with another chat template: another submission (and a flagged one)
    if info.chat_template_sha256 is not None:
        digest.update(f"chat_template={info.chat_template_sha256}\n".encode())
    if info.kind == "adapter":
        identity = {k: info.config.get(k) for k in _ADAPTER_IDENTITY_KEYS}
        digest.update(json.dumps(identity, sort_keys=True, default=str).encode())
    tensors: dict[str, torch.Tensor] = {}
    try:
        for weight_file in info.weight_files:
            if weight_file.suffix == ".safetensors":
                with safe_open(str(weight_file), framework="pt") as handle:  # type: ignore[no-untyped-call]
                    for key in handle.keys():  # noqa: SIM118 - safe_open handles are not mappings
                        tensors[key] = handle.get_tensor(key)
            else:
                loaded = torch.load(weight_file, map_location="cpu", weights_only=True)
                if not isinstance(loaded, dict):
                    raise CheckpointError(f"{weight_file.name} does not hold a state dict")
                tensors.update({k: v for k, v in loaded.items() if isinstance(v, torch.Tensor)})
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - corrupt or unsafe weight files
        raise CheckpointError(
            f"weights cannot be read safely ({type(exc).__name__}); save them with safetensors"
        ) from None
    _hash_tensors(digest, tensors)
    return digest.hexdigest()


def weights_fingerprint(model: torch.nn.Module) -> str:
    """Hash of a loaded model's state dict in float32: equal to the base's means the submission is a copy."""
    digest = hashlib.sha256()
    state = {k: v.float() for k, v in model.state_dict().items()}
    _hash_tensors(digest, state)
    return digest.hexdigest()


def _dtype() -> torch.dtype | str:
    return "auto" if torch.cuda.is_available() else torch.float32


def load_model(path: Path) -> torch.nn.Module:
    """Load a full checkpoint folder with no remote code and pickle-free weights (safetensors or weights_only)."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(
        str(path), trust_remote_code=False, weights_only=True, dtype=_dtype(), local_files_only=True
    )
    model.eval()
    return model  # type: ignore[no-any-return]


def load_checkpoint(info: CheckpointInfo, base_path: Path) -> torch.nn.Module:
    """The model a submission stands for: the checkpoint itself, or the base with the LoRA adapter merged in."""
    try:
        if info.kind == "full":
            return load_model(info.path)
        from peft import PeftModel

        base = load_model(base_path)
        merged = PeftModel.from_pretrained(base, str(info.path), is_trainable=False).merge_and_unload()
        merged.eval()
        return merged  # type: ignore[no-any-return]
    except CheckpointError:
        raise
    except Exception as exc:  # noqa: BLE001 - transformers/peft raise many types for bad folders
        raise CheckpointError(
            f"checkpoint cannot be loaded ({type(exc).__name__}); check it matches the base model and re-save it"
        ) from None
