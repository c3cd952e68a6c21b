"""What a verl plan resolves around the family's stages: roots, credentials, the GPU setup path, what each stage
would start, and what is still unresolved. Nothing here runs, imports or downloads anything: credentials are
checked by whether their variable is set (the value is never read), roots are printed as the user gave them, as
`$VARIABLE` references or as placeholders.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, Field

from trainers.verl.builders import Prerequisite, Stage

# placeholder -> (flag, environment variable)
ROOTS: dict[str, tuple[str, str]] = {
    "<MODEL_ROOT>": ("--model-root", "RLLOOP_MODEL_ROOT"),
    "<DATA_ROOT>": ("--data-root", "RLLOOP_DATA_ROOT"),
    "<CKPT_ROOT>": ("--ckpt-root", "RLLOOP_CKPT_ROOT"),
    "<RESULT_ROOT>": ("--result-root", "RLLOOP_RESULT_ROOT"),
}

# name -> (what it is, the variables that carry it (the first required), the other names `--credentials` takes)
CREDENTIALS: dict[str, tuple[str, tuple[str, ...], tuple[str, ...]]] = {
    "wandb": ("W&B (training logs)", ("WANDB_API_KEY",), ("w&b",)),
    "hf": ("Hugging Face (gated models, datasets)", ("HF_TOKEN", "HUGGING_FACE_HUB_TOKEN"), ("huggingface",)),
    "openai": ("OpenAI-compatible (GPT-4o coach, scoring)", ("OPENAI_API_KEY", "OPENAI_BASE_URL"), ()),
}

GPU_CLASSES: dict[str, str] = {
    "B200": "NVIDIA B200",
    "A100": "NVIDIA A100 80GB",
    "H100": "NVIDIA H100 80GB",
    "H200": "NVIDIA H200",
}

# what a command starts, found by what it calls
_STARTS: list[tuple[str, tuple[str, ...]]] = [
    ("verl.trainer.main_ppo", ("GPU", "Ray", "vLLM")),
    ("verl.trainer.main_generation", ("GPU", "Ray", "vLLM")),
    ("verl.trainer.main_eval", ("Ray",)),
    ("verl.trainer.fsdp_sft_trainer", ("GPU",)),
    ("verl.model_merger", ("checkpoint-merge",)),
    ("lm_eval ", ("GPU", "vLLM", "IF-Eval")),
    ("python -m trainers ", ("GPU",)),
    ("oel_extract.py", ("GPU", "vLLM")),
]
HEAVY = ("GPU", "Docker", "Ray", "vLLM", "W&B", "Hugging Face", "OpenAI", "IF-Eval", "checkpoint-merge")
_NEED_LABEL = {"wandb": "W&B", "hf": "Hugging Face", "openai": "OpenAI"}
_PLACEHOLDER = re.compile(r"<[A-Z][A-Z0-9_]*>")


class Root(BaseModel):
    value: str  # what the commands now hold in place of the placeholder
    source: str  # the flag or the environment variable it came from


class Credential(BaseModel):
    """One credential: which planned stages need it, whether it was declared, and which variables are set."""

    name: str
    what: str
    declared: bool
    stages: list[str] = Field(default_factory=list)
    variables: dict[str, bool] = Field(
        default_factory=dict
    )  # variable -> set in the environment (value unread)


def gpu_class(name: str | None) -> str | None:
    if name is None:
        return None
    spelled = name.strip().upper()
    if spelled not in GPU_CLASSES:
        raise ValueError(f"unknown GPU class {name!r}; choose one of {', '.join(GPU_CLASSES)}")
    return spelled


def setup_path(name: str) -> Prerequisite:
    """The families distinguish Blackwell (B200) from A100/H100/H200: another image, another setup script."""
    if name == "B200":
        detail = (
            "B200 path: the target checkout's B200 container and setup (run_docker_b200.sh, setup_b200.sh: "
            "CUDA 12.8+, PyTorch and vLLM built for sm_100, requirements_b200.txt, its own .venv to activate "
            "before every stage), then ray_node_setup.sh on every node"
        )
    else:
        detail = (
            f"{name} path (A100/H100/H200): the target checkout's standard container and setup (run_docker.sh, "
            "setup.sh), then ray_node_setup.sh on every node"
        )
    return Prerequisite(
        item="Setup path", detail=detail, check="nvidia-smi --query-gpu=name,compute_cap --format=csv"
    )


def credential_names(names: Iterable[str]) -> list[str]:
    """`--credentials wandb,hf` as credential names; an unknown one is refused with the valid ones."""
    chosen: list[str] = []
    for raw in names:
        spelled = raw.strip().lower()
        if not spelled:
            continue
        found = next(
            (n for n, (_, _, other) in CREDENTIALS.items() if spelled == n or spelled in other), None
        )
        if found is None:
            raise ValueError(f"unknown credential {raw!r}; choose from {', '.join(CREDENTIALS)}")
        if found not in chosen:
            chosen.append(found)
    return chosen


def hub_id(value: str) -> bool:
    """A model named by a Hugging Face id (org/name), or by a placeholder of the user's that may stand for one
    (<MODEL_OR_ID>); not a path, a root placeholder or a variable."""
    if _PLACEHOLDER.fullmatch(value):
        return value not in ROOTS
    return "/" in value and not value.startswith(("<", "/", ".", "$", "~"))


def annotate(stage: Stage, roles: Mapping[str, str], loggers: Iterable[str]) -> Stage:
    """The stage with what it would start, the credentials it needs and the model roles its command uses."""
    needs = list(stage.needs)
    if "wandb" in loggers and any(m in stage.command for m in ("verl.trainer.main_ppo", "fsdp_sft_trainer")):
        needs.append("wandb")
    if "lm_eval " in stage.command or any(hub_id(v) and v in stage.command for v in roles.values()):
        needs.append("hf")
    starts = {label for marker, labels in _STARTS if marker in stage.command for label in labels}
    if "verl." in stage.command or "<VERL_EXT>" in stage.command:
        starts.add("Docker")  # verl and the extensions run inside <VERL_IMAGE>
    starts.update(_NEED_LABEL[n] for n in needs)
    return stage.model_copy(
        update={
            "needs": [n for n in CREDENTIALS if n in needs],
            "heavy": [h for h in HEAVY if h in starts],
            "roles": {role: value for role, value in roles.items() if value in stage.command},
        }
    )


def roots(given: Mapping[str, str | None], env: Mapping[str, str]) -> dict[str, Root]:
    """Each root from its flag, else a `$VARIABLE` reference when that variable is set; else it stays a
    placeholder (absent here)."""
    resolved: dict[str, Root] = {}
    for placeholder, (flag, variable) in ROOTS.items():
        value = given.get(placeholder)
        if value:
            resolved[placeholder] = Root(value=value.rstrip("/") or value, source=flag)
        elif variable in env:
            resolved[placeholder] = Root(value=f"${variable}", source=variable)
    return resolved


def substitute(data: Any, table: Mapping[str, str]) -> Any:
    """Every string inside `data` (dicts, lists) with the placeholders of `table` replaced."""
    if isinstance(data, str):
        for placeholder, value in table.items():
            data = data.replace(placeholder, value)
        return data
    if isinstance(data, dict):
        return {substitute(k, table): substitute(v, table) for k, v in data.items()}
    if isinstance(data, list):
        return [substitute(v, table) for v in data]
    return data


def placeholders_in(texts: Iterable[str]) -> list[str]:
    """The <PLACEHOLDER>s the texts hold, in order of first appearance."""
    found: dict[str, None] = {}
    for text in texts:
        found.update(dict.fromkeys(_PLACEHOLDER.findall(text)))
    return list(found)


def credentials(declared: list[str], stages: list[Stage], env: Mapping[str, str]) -> list[Credential]:
    """Each credential declared or needed: the stages needing it, and whether each of its variables is set
    (`name in env`: the value is never read)."""
    listed = []
    for name, (what, variables, _) in CREDENTIALS.items():
        needing = [s.name for s in stages if name in s.needs]
        if name in declared or needing:
            listed.append(
                Credential(
                    name=name,
                    what=what,
                    declared=name in declared,
                    stages=needing,
                    variables={v: v in env for v in variables},
                )
            )
    return listed


def credential_gaps(listed: list[Credential] | None, stages: list[Stage]) -> list[str]:
    """What the user still has to do about credentials."""
    if listed is None:
        needing = {n: [s.name for s in stages if n in s.needs] for n in CREDENTIALS}
        wanted = "; ".join(f"{n} ({', '.join(s)})" for n, s in needing.items() if s)
        return [
            "credential intent: pass --credentials (wandb, hf, openai)"
            + (f"; the stages need {wanted}" if wanted else "")
        ]
    gaps = []
    for cred in listed:
        if not cred.declared:
            gaps.append(f"{cred.name}: needed by {', '.join(cred.stages)} but not in --credentials")
        elif cred.stages:
            required = next(iter(cred.variables))
            if not (any(cred.variables.values()) if cred.name == "hf" else cred.variables[required]):
                gaps.append(
                    f"{cred.name}: export {required} (not set here; needed by {', '.join(cred.stages)})"
                )
    return gaps
