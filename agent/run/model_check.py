"""Whether a base model folder will work in every trial, checked on the host before anything is scored.

A folder the user's own tools wrote is what `--base-model ./my-model` receives, and the grader reads it as the host's
user while every trial reads it as the sandbox's: a weights file written 0600 by root scored a baseline and then
failed every trial with "No such file or directory: /model/model.safetensors". So each thing a trial and the grader
need is checked here first, and each problem is named with its file and its fix:

- every file and folder readable by the user trials run as (`trial_user`), no link leading out of the folder (a
  trial sees the folder alone: a link into a cache's blobs/ dangles there), and the weights present;
- config.json readable, without a quantization config (rlloop trains and grades full weights) or remote code (never
  run), of a causal-LM architecture the installed transformers knows;
- a tokenizer, and under `--prompt-format chat` its chat template.

Nothing here follows a link: files are looked at with lstat, links are read, never opened.
"""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path
from typing import Any

from sandbox.namespaces import SANDBOX_UID

WEIGHT_FILES = ("model.safetensors", "pytorch_model.bin")
WEIGHT_INDEXES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
TEMPLATE_FILES = "chat_template.jinja or tokenizer_config.json's chat_template"


class BaseModelError(ValueError):
    """The base model folder will not work in a trial or the grader; the message names each file and its fix."""


def trial_user() -> tuple[int, int]:
    """(uid, gid) trials run as: the sandbox's user when rlloop runs as root (every backend drops to it), else this
    user (a namespace or container keeps the caller's uid)."""
    if os.geteuid() == 0:
        return SANDBOX_UID, SANDBOX_UID
    return os.geteuid(), os.getegid()


def _can_read(info: os.stat_result, uid: int, gid: int, *, folder: bool) -> bool:
    need = 0o5 if folder else 0o4  # a folder must be listed and entered
    if info.st_uid == uid:
        bits = (info.st_mode >> 6) & 0o7
    elif info.st_gid == gid:
        bits = (info.st_mode >> 3) & 0o7
    else:
        bits = info.st_mode & 0o7
    return bits & need == need


def _link_problem(link: Path, root: Path) -> str | None:
    target = os.readlink(link)
    name = link.relative_to(root)
    if os.path.isabs(target):
        return f"{name} is a link to {target}: a trial sees only the folder, where it leads nowhere"
    landed = os.path.normpath(os.path.join(os.path.dirname(name), target))
    if landed == ".." or landed.startswith("../") or landed.startswith(os.sep):
        return f"{name} is a link to {target}, outside the folder: a trial sees only the folder"
    return None


def file_problems(root: Path, uid: int, gid: int) -> list[str]:
    """Files and folders the trial's user cannot read, and links that leave the folder (nothing followed)."""
    unreadable: list[str] = []
    links: list[str] = []
    for here, dirs, files in os.walk(root, followlinks=False):
        base = Path(here)
        folder_info = base.lstat()
        entries = [] if _can_read(folder_info, uid, gid, folder=True) else [(base, folder_info)]
        for name in [*dirs, *files]:
            entry = base / name
            info = entry.lstat()
            if stat.S_ISLNK(info.st_mode):
                problem = _link_problem(entry, root)
                if problem:
                    links.append(problem)
            elif not stat.S_ISDIR(info.st_mode) and not _can_read(info, uid, gid, folder=False):
                entries.append((entry, info))  # a folder is looked at when os.walk enters it
        for entry, info in entries:
            owner = "root" if info.st_uid == 0 else f"uid {info.st_uid}"
            name = "the folder itself" if entry == root else str(entry.relative_to(root))
            unreadable.append(f"{name} (mode {stat.S_IMODE(info.st_mode):04o}, owner {owner})")
    problems = []
    if unreadable:
        shown = ", ".join(unreadable[:5]) + (
            f" and {len(unreadable) - 5} more" if len(unreadable) > 5 else ""
        )
        problems.append(
            f"trials run as uid {uid} and cannot read {shown}; make the folder readable (chmod -R a+rX {root}) "
            "or pass a readable copy"
        )
    if links:
        problems.append("; ".join(links[:3]) + f"; pass a copy with real files (cp -rL {root} COPY)")
    return problems


def weight_problems(root: Path) -> list[str]:
    """No weights, or an index naming shards that are not there."""
    for index in WEIGHT_INDEXES:
        path = root / index
        if path.is_file() and not path.is_symlink():
            try:
                shards = sorted(set(json.loads(path.read_text())["weight_map"].values()))
            except (OSError, ValueError, KeyError, AttributeError) as exc:
                return [
                    f"{index} cannot be read ({type(exc).__name__}); save the model again with save_pretrained"
                ]
            missing = [s for s in shards if not (root / s).exists()]
            if missing:
                return [f"{index} names shards that are not in the folder: {', '.join(missing[:5])}"]
            return []
    if any((root / name).exists() for name in WEIGHT_FILES):
        return []
    return [
        f"no weights in {root} (model.safetensors, a sharded model.safetensors.index.json, or pytorch_model.bin); "
        "save the model with save_pretrained into this folder"
    ]


def config_problems(root: Path) -> list[str]:
    """config.json unreadable, quantized, needing remote code, or of an architecture transformers cannot train."""
    try:
        config: dict[str, Any] = json.loads((root / "config.json").read_text())
    except (OSError, ValueError) as exc:
        return [
            f"config.json cannot be read ({type(exc).__name__}: {exc}); save the model with save_pretrained"
        ]
    problems = []
    quantization = config.get("quantization_config")
    if quantization:
        method = quantization.get("quant_method", "?") if isinstance(quantization, dict) else "?"
        problems.append(
            f"config.json has a quantization_config ({method}): trials train and the grader scores full weights; "
            "save a dequantized copy (load it, copy its state dict into a model made from its config without "
            "quantization_config, save_pretrained) and pass that"
        )
    if config.get("auto_map"):
        problems.append(
            "config.json's auto_map asks for the model's own code (trust_remote_code), which rlloop never runs; "
            "use a model of an architecture transformers ships"
        )
    from transformers.models.auto.modeling_auto import MODEL_FOR_CAUSAL_LM_MAPPING_NAMES

    model_type = config.get("model_type")
    if model_type not in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES:
        import transformers

        problems.append(
            f"config.json's model_type {model_type!r} is not a causal language model transformers "
            f"{transformers.__version__} can load (AutoModelForCausalLM), and every recipe and the grader load "
            "through it; use a model of a known architecture (llama, qwen2, ...) or a transformers that knows it"
        )
    architectures = config.get("architectures") or []
    causal = set(MODEL_FOR_CAUSAL_LM_MAPPING_NAMES.values())
    if architectures and not any(name in causal for name in architectures):
        problems.append(
            f"config.json's architectures {architectures} hold no causal language model (a classifier or encoder "
            "head would be replaced by an untrained one); pass the model's causal-LM checkpoint"
        )
    return problems


def tokenizer_problems(root: Path, prompt_format: str) -> list[str]:
    """No tokenizer transformers can load; under chat prompts, no chat template."""
    from transformers import AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(root)
    except Exception as exc:  # noqa: BLE001 - whatever transformers raises, the user needs the same fix
        first = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else ""
        return [
            f"no tokenizer transformers can load in {root} ({type(exc).__name__}: {first}); save it beside the "
            "weights (tokenizer.save_pretrained(folder): tokenizer.json and tokenizer_config.json)"
        ]
    if prompt_format == "chat" and not tokenizer.chat_template:
        return [
            f"--prompt-format chat needs the model's chat template, and {root} has none ({TEMPLATE_FILES}); save "
            "the tokenizer with its template (tokenizer.chat_template = ...; tokenizer.save_pretrained(folder)), "
            "or run with --prompt-format plain"
        ]
    return []


def base_model_problems(root: Path, *, prompt_format: str = "plain") -> list[str]:
    """Every reason the folder `root` would fail a trial or the grader, one line each (empty: it will load)."""
    uid, gid = trial_user()
    problems = file_problems(root, uid, gid)
    problems += weight_problems(root)
    problems += config_problems(root)
    if not any(p.startswith("trials run as") for p in problems):  # an unreadable tokenizer says nothing new
        problems += tokenizer_problems(root, prompt_format)
    return problems


def check_base_model(root: Path, *, prompt_format: str = "plain") -> Path:
    """`root` when it will work in every trial and the grader; BaseModelError naming each problem otherwise."""
    problems = base_model_problems(root, prompt_format=prompt_format)
    if problems:
        listed = (
            problems[0] if len(problems) == 1 else " ".join(f"({i}) {p};" for i, p in enumerate(problems, 1))
        )
        raise BaseModelError(f"the base model {root} will not work in a trial: {listed.rstrip(';')}")
    return root
