"""Resolve a base model name to a local HF checkpoint folder: built-in, local path, or hub id."""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path

BUILTIN_MODELS: dict[str, str] = {
    "tiny-arith": "A 0.34M-parameter Llama with a character tokenizer, trained briefly on arith (weak baseline).",
}


class ModelNotFoundError(RuntimeError):
    """The base model is neither built in, nor a local checkpoint, nor reachable on the hub."""


def _is_checkpoint(path: Path) -> bool:
    return path.is_dir() and (path / "config.json").is_file()


def _readable_by_sandboxes(path: Path) -> Path:
    """A base model is mounted read-only into containers that run as an unprivileged user: make the folders we own
    world-readable (temp-dir builds start as 0700)."""
    if path.stat().st_uid != os.geteuid():
        return path
    for item in [path, *path.rglob("*")]:
        mode = item.stat().st_mode
        wanted = mode | (0o555 if item.is_dir() else 0o444)
        if wanted != mode:
            item.chmod(wanted)
    return path


def resolve_base_model(name: str, home: Path, on_build: Callable[[str], None] | None = None) -> Path:
    """Return a local checkpoint folder for `name`, building built-in models on first use.

    Order: built-in name (cached under RLLOOP_HOME/models), an existing local folder, a cached hub download, then the
    Hugging Face hub (online users).
    """
    models_dir = home / "models"
    if name in BUILTIN_MODELS:
        target = models_dir / name
        if not _is_checkpoint(target):
            if on_build:
                on_build(name)
            from trainers.tiny import build_tiny_arith

            build_tiny_arith(target)
        return _readable_by_sandboxes(target.resolve())
    local = Path(name).expanduser()
    if local.exists():
        if not _is_checkpoint(local):
            raise ModelNotFoundError(
                f"{local} exists but is not a Hugging Face checkpoint (no config.json); point --base-model at the "
                "folder that holds config.json and the weights"
            )
        return local.resolve()
    cached = models_dir / name.replace("/", "--")
    if _is_checkpoint(cached):
        return _readable_by_sandboxes(cached.resolve())
    if "/" in name and not os.environ.get("HF_HUB_OFFLINE"):
        try:
            from huggingface_hub import snapshot_download

            snapshot_download(
                name,
                local_dir=cached,
                allow_patterns=["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*"],
            )
            return _readable_by_sandboxes(cached.resolve())
        except Exception as exc:
            raise ModelNotFoundError(
                f"cannot download {name!r} from the Hugging Face hub ({type(exc).__name__}); check the id and your "
                f"connection, or download it yourself and pass the local folder to --base-model"
            ) from None
    known = ", ".join(BUILTIN_MODELS)
    raise ModelNotFoundError(
        f"unknown base model {name!r}: not built in ({known}), not a local folder, not a hub id (org/name)"
    )
