"""Run configuration: one pydantic model, filled from a file, `RLLOOP_*` env vars and CLI flags of the same names.

Every field that names an extension (benchmark, recipes, sandbox, proposer) is checked against its registry when the
model is built, wherever it is built (CLI, config file, env vars, the service, a sweep's worker): a bad name fails at
once with the known names, never after the baseline was graded."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Literal

import yaml
from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema, field_validator
from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, PydanticBaseSettingsSource, SettingsConfigDict

from tasks.plugins import registered, registered_list

if TYPE_CHECKING:
    from tasks.plugins import Registry

_DURATION = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([smhd]?)\s*$")
_UNIT_SECONDS = {"": 1, "s": 1, "m": 60, "h": 3600, "d": 86400}


def parse_duration(value: str | float | int) -> float:
    """'20m' -> 1200.0, '1.5h' -> 5400.0, '90' -> 90.0 (seconds)."""
    if isinstance(value, int | float):
        return float(value)
    match = _DURATION.match(value)
    if not match:
        raise ValueError(f"cannot read {value!r} as a duration; write e.g. 90s, 20m, 1.5h")
    number, unit = match.groups()
    return float(number) * _UNIT_SECONDS[unit]


def _duration_or_number(value: Any) -> Any:
    return parse_duration(value) if isinstance(value, str) else value


_READ_DURATION = BeforeValidator(_duration_or_number)
Duration = Annotated[
    float,
    _READ_DURATION,
    WithJsonSchema({"anyOf": [{"type": "number"}, {"type": "string", "examples": ["90s", "20m", "1.5h"]}]}),
]
"""Seconds; a string is read as a duration ("90s", "20m", "1.5h"). Every surface (CLI, config file, service, sweep)
reads a field of this type the same way."""


def is_duration(field: FieldInfo) -> bool:
    """Whether a model field was declared as `Duration` (surfaces that show it as text, e.g. CLI flags, ask this)."""
    return any(item is _READ_DURATION for item in field.metadata)


RUN_ID_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$"
RUN_ID_RULE = "1-128 characters: letters, digits, '.', '_' or '-', starting with a letter or digit"
_RUN_ID = re.compile(RUN_ID_PATTERN)


def check_run_id(value: str | None) -> str | None:
    """A run id names a folder under RLLOOP_HOME/runs: nothing that could climb out of it or hide."""
    if value is not None and not _RUN_ID.match(value):
        raise ValueError(f"run_id must be {RUN_ID_RULE}")
    return value


def _benchmarks() -> Registry[Any]:
    from tasks.registry import BENCHMARKS

    return BENCHMARKS


def _recipes() -> Registry[Any]:
    from trainers.registry import RECIPES

    return RECIPES


def _sandboxes() -> Registry[Any]:
    from sandbox.registry import SANDBOXES

    return SANDBOXES


def _proposers() -> Registry[Any]:
    from agent.run.plugins import PROPOSERS

    return PROPOSERS


def default_home() -> Path:
    return Path(".rlloop")


class RunConfig(BaseSettings):
    """Everything a research run needs to know. Every field is also a CLI flag (`--loop-n`) and an env var
    (`RLLOOP_LOOP_N`)."""

    model_config = SettingsConfigDict(env_prefix="RLLOOP_", extra="forbid", validate_assignment=True)

    home: Path = Field(
        default_factory=default_home, description="Where models, runs and the MLflow store live."
    )
    base_model: str = Field("tiny-arith", description="Built-in model name, local HF folder, or hub id.")
    benchmark: Annotated[str, AfterValidator(registered(_benchmarks))] = Field(
        "arith", description="Benchmark name (see `rlloop benchmarks`)."
    )
    prompt_format: Literal["plain", "chat"] = Field(
        "plain",
        description="plain: the benchmark's prompt as it is; chat: as the user turn of the base model's own chat "
        "template (grader and trials alike).",
    )
    system_prompt: str | None = Field(None, description="With --prompt-format chat: a system turn first.")
    loop_n: int = Field(4, ge=1, le=1000, description="Number of trials to run.")
    timeout: Duration = Field(1200.0, gt=0, description="Wall-time budget of the run.")
    sandbox: Annotated[str, AfterValidator(registered(_sandboxes))] = Field(
        "auto",
        description="Where trials run: auto (docker when usable, else local), local, docker, ray, or a plugin's "
        "name (see `rlloop sandbox list`).",
    )
    proposer: Annotated[str, AfterValidator(registered(_proposers))] = Field(
        "auto",
        description="auto = llm when --driver-model is set, else builtin; or a plugin proposer's name.",
    )
    driver_model: str | None = Field(None, description="LLM for the proposer (OpenAI-compatible endpoint).")
    recipes: Annotated[str | None, AfterValidator(registered_list(_recipes))] = Field(
        None, description="Comma list of trainer recipes the proposer may use (default: all registered)."
    )
    approval: str = Field(
        "never", description="Approval policy: never, always, code, budget (comma-combinable)."
    )
    approval_budget_s: Duration = Field(
        600.0, description="Estimated compute seconds above which `budget` asks."
    )
    seed: int = Field(0, description="Seed of the run (proposer, data order, trials).")
    trial_timeout: Duration = Field(600.0, gt=0, description="Wall-time limit of one trial.")
    trial_steps: int | None = Field(
        None,
        ge=1,
        description="Fixed training steps per trial (reproducible); default: trials are time-boxed.",
    )
    trial_seconds: float | None = Field(
        None,
        gt=0,
        description="Wall seconds per trial, from its start to its validated checkpoint (start-up, training, saving, "
        "validation): every built-in trial is time-boxed at exactly this (equal compute for every policy; a policy "
        "may spend several in one trial); default: a share of the time left.",
    )
    trial_prewarm: bool = Field(
        True,
        description="Start each trial's sandbox, and its imports, while the previous trial is validated, graded and "
        "the next one proposed; its clock starts when its proposal is final (local and Docker, one trial at a "
        "time, no GPU).",
    )
    trial_memory_mb: int = Field(6144, ge=256, description="Memory limit of one trial.")
    trial_cpus: float | None = Field(None, description="CPU limit of one trial (docker).")
    trial_concurrency: int = Field(
        1, ge=1, le=64, description="Trials trained at once (each with cores / K unless --trial-cpus is set)."
    )
    ray_address: str | None = Field(
        None,
        description="With --sandbox ray: the Ray cluster's address (host:6379, ray://host:10001, auto); RAY_ADDRESS "
        "when unset. Every node that may run trials must see RLLOOP_HOME at the same path (checked at start).",
    )
    trial_gpus: int = Field(
        0,
        ge=0,
        description="GPUs leased to each trial (CUDA_VISIBLE_DEVICES, a docker device request, ray num_gpus); "
        "0 trains on CPU. With N > 0 docker trials run in the GPU image (`rlloop sandbox build --gpu`).",
    )
    max_submissions: int | None = Field(
        None, ge=1, description="Cap on graded submissions (None: loop_n + 1)."
    )
    min_submit_interval: Duration = Field(0.0, ge=0, description="Minimum seconds between two submissions.")
    submit: Literal["all", "improved", "final"] = Field(
        "improved",
        description="Which checkpoints go to the grader (agent.loop.submission): improved = only one that beats the "
        "best submitted one on the valid split beyond noise; final = the best by valid score, once, at the end; "
        "all = every trained checkpoint.",
    )
    public_fraction: float = Field(
        0.5,
        ge=0.0,
        lt=1.0,
        description="Share of the hidden test set whose score /submit returns; 0 disables.",
    )
    eval_limit: int | None = Field(None, ge=1, description="Grade on the first N hidden test samples only.")
    valid_limit: int = Field(
        500,
        ge=1,
        description="Validate each checkpoint on the first N samples of the public valid split (free, but a "
        "generation per sample: lower it where completions are long).",
    )
    test_seed: int | None = Field(
        None,
        description="Seed of the hidden test split (same seed, same test set across runs); "
        "default: a secret the grader draws once per run.",
    )
    eval_batch_size: int = Field(64, ge=1, description="Samples the grader generates for at once.")
    run_id: Annotated[str | None, AfterValidator(check_run_id)] = Field(
        None, description="Name the run (default: time, benchmark and a random suffix)."
    )
    agent_name: str = Field("rlloop", description="Agent name written to results.csv.")
    llm_max_usd: float | None = Field(
        None, ge=0, description="Stop the run once the driver LLM has cost this much."
    )
    llm_max_tokens: int | None = Field(
        None, ge=0, description="Stop the run after this many driver LLM tokens."
    )
    max_compute_s: float | None = Field(
        None, ge=0, description="Stop the run after this many trial compute seconds."
    )
    llm_price_file: Path | None = Field(
        None, description="YAML/JSON price table (USD per 1M tokens per model)."
    )
    llm_max_repair_attempts: int = Field(
        2, ge=0, le=10, description="Re-asks for malformed output or broken code."
    )
    smoke_timeout: Duration = Field(
        180.0, gt=0, description="Limit of the smoke run that checks proposed code."
    )
    llm_max_tool_calls: int = Field(
        8, ge=0, le=100, description="Tool calls (data, logs, scripts) the driver LLM may make per proposal."
    )
    llm_script_timeout: Duration = Field(
        60.0, gt=0, description="Wall-time limit of one script the driver LLM runs in the sandbox."
    )
    agent_llm_base_url: str | None = Field(
        None,
        description="External agents: the OpenAI-compatible base URL (ending in /v1) their model calls go to, through "
        "rlloop's metered gateway; unset, they get no model.",
    )
    agent_llm_key_env: str | None = Field(
        None,
        description="External agents: the host variable holding the upstream's API key; the gateway adds it, the "
        "agent only ever gets a placeholder (unset: no key is sent).",
    )
    agent_llm_models: str | None = Field(
        None, description="External agents: comma list of the models they may call (default: any)."
    )
    agent_llm_max_request_bytes: int = Field(
        1_000_000, ge=1024, description="External agents: the largest model request the gateway forwards."
    )
    agent_llm_max_output_tokens: int = Field(
        32_000,
        ge=1,
        description="External agents, with a token or dollar cap: the output bound the gateway adds to a model "
        "request that names none, so the call's cost is reserved before it is forwarded.",
    )
    memory: bool = Field(
        False,
        description="Keep lessons per benchmark and base model under RLLOOP_HOME/memory and give them to the next "
        "run's proposer.",
    )
    mlflow_tracking_uri: str | None = Field(None, description="Default: sqlite:///<home>/mlflow.db.")
    quiet: bool = Field(False, description="Print nothing to the console (the run log keeps it all).")

    @field_validator("approval")
    @classmethod
    def _approval(cls, value: str) -> str:
        allowed = {"never", "always", "code", "budget"}
        parts = [p.strip() for p in value.split(",") if p.strip()]
        bad = [p for p in parts if p not in allowed]
        if bad or not parts:
            raise ValueError(
                f"unknown approval policy {value!r}; use never, always, code, budget or a comma list"
            )
        return ",".join(parts)

    @field_validator("agent_llm_key_env")
    @classmethod
    def _key_env(cls, value: str | None) -> str | None:
        """The variable's name, never the key: a value that is not a variable name is refused before it is logged."""
        if value is None:
            return None
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", value):
            raise ValueError(
                "give the name of the host variable that holds the key (e.g. OPENAI_API_KEY), not the key itself"
            )
        return value

    @field_validator("agent_llm_models")
    @classmethod
    def _models(cls, value: str | None) -> str | None:
        if value is None:
            return None
        return ",".join(m.strip() for m in value.split(",") if m.strip()) or None

    @property
    def tracking_uri(self) -> str:
        return self.mlflow_tracking_uri or f"sqlite:///{(self.home / 'mlflow.db').resolve()}"

    @property
    def proposer_name(self) -> str:
        if self.proposer == "auto":
            return "llm" if self.driver_model else "builtin"
        return self.proposer


class _FieldsOnlyRunConfig(RunConfig):
    """RunConfig from the given values alone: the process's own RLLOOP_* environment does not leak in."""

    @classmethod
    def settings_customise_sources(
        cls,
        settings_cls: type[BaseSettings],
        init_settings: PydanticBaseSettingsSource,
        env_settings: PydanticBaseSettingsSource,
        dotenv_settings: PydanticBaseSettingsSource,
        file_secret_settings: PydanticBaseSettingsSource,
    ) -> tuple[PydanticBaseSettingsSource, ...]:
        return (init_settings,)


def run_config_of(values: dict[str, Any]) -> RunConfig:
    """A RunConfig of exactly these fields (the service's request, a sweep's overrides); env vars play no part.
    Raises pydantic.ValidationError with RunConfig's messages."""
    return _FieldsOnlyRunConfig(**values)


def load_config_file(path: Path) -> dict[str, Any]:
    """Read a YAML or JSON run config; one clear error when it cannot be read."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise ValueError(f"cannot read config file {path}: {exc.strerror}") from None
    data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(data, dict):
        raise ValueError(f"config file {path} must hold a mapping of field: value")
    return {k.replace("-", "_"): v for k, v in data.items()}
