"""An external agent's folder: AutoRL-Bench's (`config.yaml`: `name`, `start`, optional `env_vars`, `description`,
and the `start` script), PostTrainBench's (`solve.sh`), or a coding agent rlloop ships, by name (`named`); read and
checked before anything starts, with one line naming what is wrong."""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

import yaml
from pydantic import BaseModel, Field, ValidationError, field_validator

from agent.external import named, posttrainbench

if TYPE_CHECKING:
    from agent.run import RunConfig


class ExternalAgentError(ValueError):
    """The agent folder cannot be used (no config.yaml, bad fields, missing start script)."""


class ExternalAgentSpec(BaseModel):
    """An agent folder's config.yaml, as AutoRL-Bench defines it."""

    name: str = Field(min_length=1)
    start: str = "start.sh"
    contract: Literal["autorl-bench", "posttrainbench"] = "autorl-bench"  # whose agent layout it follows
    description: str = ""
    env_vars: dict[str, str] = Field(default_factory=dict)
    folder: Path = Path()

    @field_validator("env_vars", mode="before")
    @classmethod
    def _stringify(cls, value: Any) -> Any:
        if isinstance(value, dict):
            return {str(k): "" if v is None else str(v) for k, v in value.items()}
        return value

    @property
    def start_script(self) -> Path:
        return self.folder / self.start


def is_agent_folder(value: str | Path) -> bool:
    """True for a folder holding config.yaml (AutoRL-Bench) or solve.sh (PostTrainBench), or the name of a coding
    agent rlloop ships (`claude-code`, `codex`, `opencode`): how `--agents` tells an external agent from
    `builtin`/`llm`."""
    path = named.resolve(value)
    return path.is_dir() and ((path / "config.yaml").is_file() or posttrainbench.is_solve_folder(path))


def load_agent(folder: str | Path) -> ExternalAgentSpec:
    """Read and check `folder/config.yaml` (or a named agent's folder); one line naming what is wrong otherwise."""
    root = named.resolve(folder).resolve()
    config_path = root / "config.yaml"
    if posttrainbench.is_solve_folder(root):
        return ExternalAgentSpec(
            name=root.name, start=posttrainbench.START, contract=posttrainbench.CONTRACT, folder=root
        )
    if not config_path.is_file():
        raise ExternalAgentError(
            f"{root} is not an agent folder: it has no config.yaml (name, start, env_vars; AutoRL-Bench's) "
            "and no solve.sh (PostTrainBench's)"
        )
    try:
        data = yaml.safe_load(config_path.read_text()) or {}
    except yaml.YAMLError as exc:
        raise ExternalAgentError(f"{config_path} is not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise ExternalAgentError(f"{config_path} must be a mapping with at least `name` and `start`")
    try:
        spec = ExternalAgentSpec.model_validate({**data, "folder": root})
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise ExternalAgentError(f"{config_path}: {problems}") from None
    start = spec.start_script.resolve()
    if not start.is_file() or root not in start.parents:
        raise ExternalAgentError(f"{config_path}: start script {spec.start!r} is not a file inside {root}")
    return spec


def named_agent_problem(spec: ExternalAgentSpec, config: RunConfig) -> str | None:
    """Why a coding agent rlloop ships (claude-code, codex, opencode) cannot run with `config`, else None: it
    needs a model (the gateway's upstream and the model it runs)."""
    if not named.is_named_folder(spec.folder):
        return None
    models = [m for m in (config.agent_llm_models or "").split(",") if m.strip()]
    if config.agent_llm_base_url and models:
        return None
    command, api = named.NAMED_AGENTS[spec.folder.name]
    return (
        f"--agents {spec.name} runs `{command}`, which needs a model: give --agent-llm-base-url (an upstream "
        f"serving {api}), --agent-llm-models MODEL (the first is the one it runs) and --agent-llm-key-env VAR "
        "(the host variable holding the key)"
    )
