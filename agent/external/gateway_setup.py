"""What a model gateway is given and what it records: its config (from a run's `agent_llm_*` fields), the per-run
placeholder key and the variables an agent's SDK reads to reach the gateway with it, and a transcript line per call
(`GatewayCall`)."""

from __future__ import annotations

import secrets
from typing import TYPE_CHECKING

from pydantic import BaseModel, ConfigDict, Field

if TYPE_CHECKING:
    from agent.run import RunConfig

PLACEHOLDER_PREFIX = "rlloop-placeholder-"


class GatewayError(ValueError):
    """The gateway cannot be set up as configured (the key's variable is unset, a bad URL)."""


class GatewayConfig(BaseModel):
    """Where the agent's model calls go and what bounds them (built from a run's `agent_llm_*` fields)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    base_url: str = Field(min_length=1, description="The upstream's OpenAI-style base URL, ending in /v1.")
    key_env: str | None = Field(
        default=None, description="Host variable holding the real key (None: send no key)."
    )
    models: tuple[str, ...] = Field(default=(), description="Models the agent may use; empty: any.")
    max_request_bytes: int = Field(default=1_000_000, ge=1, description="Largest request body forwarded.")
    max_tokens: int | None = Field(
        default=None, ge=0, description="Tokens in + out the agent may use in the run."
    )
    max_usd: float | None = Field(
        default=None, ge=0, description="Dollars the agent's calls may cost in the run."
    )
    clip_bytes: int = Field(
        default=4096, ge=0, description="How much of each call's messages the transcript keeps."
    )
    default_max_output_tokens: int = Field(
        default=32_000,
        ge=1,
        description="With a cap set, the output bound added to a request that names none (Codex's Responses "
        "requests), so what the call may cost is known before it is forwarded; 32,000 is what Claude Code and "
        "OpenCode ask for themselves.",
    )
    timeout_s: float = Field(default=600.0, gt=0, description="Limit of one upstream call.")

    @classmethod
    def from_run(cls, config: RunConfig) -> GatewayConfig | None:
        """The gateway of a run with `agent_llm_base_url`; None without one (the agent gets no model)."""
        if not config.agent_llm_base_url:
            return None
        return cls(
            base_url=config.agent_llm_base_url,
            key_env=config.agent_llm_key_env,
            models=tuple(m for m in (config.agent_llm_models or "").split(",") if m),
            max_request_bytes=config.agent_llm_max_request_bytes,
            default_max_output_tokens=config.agent_llm_max_output_tokens,
            max_tokens=config.llm_max_tokens,
            max_usd=config.llm_max_usd,
        )


class GatewayCall(BaseModel):
    """One line of the transcript: one request the agent made, forwarded or refused."""

    time: float  # unix seconds when it arrived
    method: str
    path: str
    model: str | None = None
    stream: bool = False
    status: int
    prompt_tokens: int = 0
    completion_tokens: int = 0
    cost_usd: float = 0.0
    latency_ms: float
    refused: str | None = None  # why the gateway answered itself, without calling the upstream
    estimated: bool = False  # the upstream reported no usage: tokens estimated from bytes, counted high
    held_ms: float = 0.0  # how long the call waited for calls in flight before it could go (caps near)
    reserved_tokens: int = 0  # what the call reserved against the token cap while in flight
    request: str = ""  # the messages (or input, prompt), clipped
    response: str = ""  # the answer's text (or body), clipped


def new_placeholder() -> str:
    """A per-run key the agent's SDK can send: worthless anywhere but at this run's gateway."""
    return f"{PLACEHOLDER_PREFIX}{secrets.token_hex(16)}"


def agent_env(placeholder: str, base_url: str, models: tuple[str, ...] | list[str]) -> dict[str, str]:
    """The variables OpenAI-, Anthropic- and LiteLLM-style agents read, pointing at the gateway at `base_url` (the
    relay's address as the agent sees it) with the placeholder key. `base_url` may be a shell reference
    (`${RLLOOP_GRADER_URL}`): the launcher expands it where the sandbox knows the address."""
    v1 = f"{base_url}/v1"
    env = {
        "OPENAI_API_KEY": placeholder,
        "OPENAI_BASE_URL": v1,
        "OPENAI_API_BASE": v1,  # LiteLLM's and the pre-1.0 openai SDK's name
        "ANTHROPIC_API_KEY": placeholder,
        "ANTHROPIC_BASE_URL": base_url,  # the Anthropic SDK appends /v1/messages itself
        "LITELLM_API_KEY": placeholder,
        "LITELLM_API_BASE": v1,
        "LITELLM_PROXY_API_KEY": placeholder,
        "LITELLM_PROXY_API_BASE": v1,
    }
    if models:
        env["OPENAI_MODEL"] = env["LLM_MODEL"] = models[0]
        env["LLM_MODELS"] = ",".join(models)
    return env
