"""What a call costs: USD per million input/output tokens, per model, settable by the user.

The built-in list prices are a convenience and go stale; a price file (YAML or JSON) or `RLLOOP_LLM_PRICES`
overrides them. A model with no price costs 0 and is warned about once, so a run never fails over a missing price.
"""

from __future__ import annotations

import json
import logging
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr, ValidationError

logger = logging.getLogger(__name__)

PRICES_ENV = "RLLOOP_LLM_PRICES"  # a path to a YAML/JSON price file, or the JSON itself


class ModelPrice(BaseModel):
    """USD per one million tokens."""

    model_config = ConfigDict(extra="forbid")

    input_per_1m: float = Field(ge=0, description="USD per 1M prompt tokens.")
    output_per_1m: float = Field(ge=0, description="USD per 1M completion tokens.")


# List prices (USD / 1M tokens) when this table was written; override them with a price file.
DEFAULT_PRICES: dict[str, ModelPrice] = {
    "gpt-4o": ModelPrice(input_per_1m=2.50, output_per_1m=10.00),
    "gpt-4o-mini": ModelPrice(input_per_1m=0.15, output_per_1m=0.60),
    "gpt-4.1": ModelPrice(input_per_1m=2.00, output_per_1m=8.00),
    "gpt-4.1-mini": ModelPrice(input_per_1m=0.40, output_per_1m=1.60),
    "gpt-4.1-nano": ModelPrice(input_per_1m=0.10, output_per_1m=0.40),
    # what the coding agents run (`rlloop bench --agents claude-code,codex,opencode`); "gpt-5" also prices
    # gpt-5-codex and gpt-5.1-codex (the longest known prefix)
    "gpt-5": ModelPrice(input_per_1m=1.25, output_per_1m=10.00),
    "gpt-5-mini": ModelPrice(input_per_1m=0.25, output_per_1m=2.00),
    "gpt-5-nano": ModelPrice(input_per_1m=0.05, output_per_1m=0.40),
    "claude-opus-4-5": ModelPrice(input_per_1m=5.00, output_per_1m=25.00),
    "claude-sonnet-4-5": ModelPrice(input_per_1m=3.00, output_per_1m=15.00),
    "claude-haiku-4-5": ModelPrice(input_per_1m=1.00, output_per_1m=5.00),
}


class PriceTableError(ValueError):
    """A price file or `RLLOOP_LLM_PRICES` value that cannot be read; the message says which and why."""


class PriceTable(BaseModel):
    """Per-model prices. Lookup is exact, then by the longest known prefix ("gpt-4o-2024-08-06" -> "gpt-4o")."""

    model_config = ConfigDict(extra="forbid")

    prices: dict[str, ModelPrice] = Field(default_factory=dict)
    _warned: set[str] = PrivateAttr(default_factory=set)

    @classmethod
    def default(cls) -> PriceTable:
        return cls(prices=dict(DEFAULT_PRICES))

    @classmethod
    def from_mapping(cls, data: Mapping[str, Any], source: str = "price table") -> PriceTable:
        """Accept `{"prices": {model: {...}}}` or the bare `{model: {input_per_1m, output_per_1m}}`."""
        raw = data.get("prices", data) if isinstance(data, Mapping) else data
        try:
            return cls.model_validate({"prices": raw})
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(part) for part in first["loc"])
            raise PriceTableError(
                f"{source}: {where}: {first['msg']} (expected model: {{input_per_1m: USD, output_per_1m: USD}})"
            ) from None

    @classmethod
    def from_file(cls, path: str | Path) -> PriceTable:
        """Read a YAML or JSON price file (JSON is valid YAML, so one parser reads both)."""
        file = Path(path)
        try:
            data = yaml.safe_load(file.read_text(encoding="utf-8"))
        except OSError as exc:
            raise PriceTableError(f"cannot read price file {file}: {exc.strerror or exc}") from None
        except yaml.YAMLError as exc:
            raise PriceTableError(
                f"price file {file} is not valid YAML/JSON: {str(exc).splitlines()[0]}"
            ) from None
        if not isinstance(data, Mapping):
            raise PriceTableError(f"price file {file} must hold a mapping of model -> prices")
        return cls.from_mapping(data, source=str(file))

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> PriceTable:
        """Defaults, overridden by `RLLOOP_LLM_PRICES` (a file path or inline JSON) when it is set."""
        env = os.environ if environ is None else environ
        value = env.get(PRICES_ENV, "").strip()
        table = cls.default()
        if not value:
            return table
        if value.startswith("{"):
            try:
                data = json.loads(value)
            except json.JSONDecodeError as exc:
                raise PriceTableError(f"{PRICES_ENV} is not valid JSON: {exc}") from None
            override = cls.from_mapping(data, source=PRICES_ENV)
        else:
            override = cls.from_file(value)
        return table.merged(override)

    def merged(self, other: PriceTable) -> PriceTable:
        """A new table: this one's prices, replaced by `other`'s where both name a model."""
        return PriceTable(prices={**self.prices, **other.prices})

    def price_for(self, model: str) -> ModelPrice | None:
        names = [model]
        if "/" in model:  # "openai/gpt-4o" as routers spell it
            names.append(model.rsplit("/", 1)[1])
        for name in names:
            if name in self.prices:
                return self.prices[name]
        for name in names:
            prefixes = [key for key in self.prices if name.startswith(key + "-")]
            if prefixes:
                return self.prices[max(prefixes, key=len)]
        return None

    def cost(self, model: str, prompt_tokens: int, completion_tokens: int) -> float:
        """USD for one call; 0 (with a single warning per model) when the model has no price."""
        price = self.price_for(model)
        if price is None:
            if model not in self._warned:
                self._warned.add(model)
                logger.warning(
                    "no price for LLM model %r: its calls are counted as $0; add it to a price file (%s)",
                    model,
                    PRICES_ENV,
                )
            return 0.0
        return (prompt_tokens * price.input_per_1m + completion_tokens * price.output_per_1m) / 1_000_000
