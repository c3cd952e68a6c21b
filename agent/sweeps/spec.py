"""What a sweep is: the grid of combinations and the run settings they share; run ids derived, never random."""

from __future__ import annotations

import hashlib
import itertools
import re
import time
from pathlib import Path
from typing import Any

from pydantic import BaseModel, Field, ValidationError, field_validator

from agent.run import Duration, run_config_of

_UNSAFE = re.compile(r"[^A-Za-z0-9._-]+")
MAX_RUN_ID = 128


def slug(value: str, limit: int = 40) -> str:
    """A run-id-safe piece of `value` (letters, digits, '.', '_', '-')."""
    return _UNSAFE.sub("-", value).strip("-.")[:limit] or "x"


def new_sweep_id() -> str:
    return f"sweep-{time.strftime('%Y%m%d-%H%M%S')}"


class Combination(BaseModel):
    """One cell of the grid: one research run."""

    benchmark: str
    base_model: str
    agent: str  # a proposer's name (builtin, llm, a plugin), a coding agent's (claude-code, codex, opencode) or the
    # path of an external agent folder
    seed: int

    @property
    def is_external(self) -> bool:
        from agent.proposers import PROPOSERS

        return self.agent not in PROPOSERS

    @property
    def agent_label(self) -> str:
        """How reports name the agent: builtin, llm, a coding agent's name, or the external folder's name."""
        from agent.external import named

        return self.agent if not self.is_external else named.resolve(self.agent).name

    def run_id(self, sweep_id: str) -> str:
        """Deterministic: the same sweep id and combination always name the same run (that is what resumes)."""
        from agent.external import named

        agent = slug(self.agent_label, 24)
        if self.is_external:  # two folders with one name must not share a run
            folder = named.resolve(self.agent).resolve()
            agent += "-" + hashlib.sha256(str(folder).encode()).hexdigest()[:6]
        parts = [slug(sweep_id, 48), slug(self.benchmark, 20), slug(Path(self.base_model).name, 24), agent]
        run_id = "--".join(parts) + f"--s{self.seed}"
        if len(run_id) > MAX_RUN_ID:
            digest = hashlib.sha256(run_id.encode()).hexdigest()[:10]
            run_id = f"{run_id[: MAX_RUN_ID - 11]}-{digest}"
        return run_id


class SweepSpec(BaseModel):
    """The grid and the settings every run of it shares (the rest of RunConfig keeps its defaults)."""

    sweep_id: str = Field(default_factory=new_sweep_id)
    benchmarks: list[str] = Field(min_length=1)
    base_models: list[str] = Field(min_length=1)
    agents: list[str] = Field(default_factory=lambda: ["builtin"], min_length=1)
    seeds: int = Field(1, ge=1, le=100, description="Seeds 0..N-1 for every combination.")
    timeout: Duration = Field(1800.0, gt=0, description="Wall-time budget of each run.")
    loop_n: int | None = Field(None, ge=1, description="Trials per run (RunConfig default when None).")
    concurrency: int = Field(1, ge=1, le=256, description="Runs at once (local) or in flight (Ray).")
    ray_address: str | None = Field(
        None, description="Ray cluster address for the ray executor (auto picks it)."
    )
    executor: str = Field(
        "auto",
        description="Where runs go: auto (ray when ray_address is set, else local), local, ray, or a plugin.",
    )
    run_overrides: dict[str, Any] = Field(
        default_factory=dict, description="Other RunConfig fields for every run, e.g. eval_limit, sandbox."
    )

    @field_validator("run_overrides")
    @classmethod
    def _run_fields(cls, value: dict[str, Any]) -> dict[str, Any]:
        """Checked now, with RunConfig's messages: a bad value fails the sweep before its first run starts."""
        try:
            run_config_of(value)
        except ValidationError as exc:
            problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
            raise ValueError(f"invalid run_overrides: {problems}") from None
        return value

    @field_validator("executor")
    @classmethod
    def _executor(cls, value: str) -> str:
        from agent.sweeps.executors import EXECUTORS

        return EXECUTORS.check(value)

    @field_validator("sweep_id")
    @classmethod
    def _safe_id(cls, value: str) -> str:
        if not value or slug(value, 200) != value:
            raise ValueError("sweep id may only contain letters, digits, '.', '_' and '-'")
        return value

    @field_validator("benchmarks", "base_models", "agents", mode="before")
    @classmethod
    def _split(cls, value: Any) -> Any:
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list):
            return [str(v).strip() for v in value if str(v).strip()]
        return value

    def combinations(self) -> list[Combination]:
        return [
            Combination(benchmark=b, base_model=m, agent=a, seed=s)
            for b, m, a, s in itertools.product(
                self.benchmarks, self.base_models, self.agents, range(self.seeds)
            )
        ]

    def run_config_fields(self, combination: Combination, run_id: str, home: Path) -> dict[str, Any]:
        """The RunConfig fields of one combination's run."""
        fields: dict[str, Any] = {
            **self.run_overrides,
            "home": str(home),
            "benchmark": combination.benchmark,
            "base_model": combination.base_model,
            "seed": combination.seed,
            "timeout": self.timeout,
            "run_id": run_id,
            "quiet": True,
        }
        if self.loop_n is not None:
            fields["loop_n"] = self.loop_n
        if not combination.is_external:
            fields["proposer"] = combination.agent
        return fields
