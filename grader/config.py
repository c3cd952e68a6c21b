"""Pydantic configs for the grader: how a model is evaluated (`EvalConfig`) and how a grading server runs.

`EvalConfig.identity()` is part of every score's identity: a baseline cached under one config is never reused for
another, so changing the prompt format, sampling or sample limit always re-scores the baseline. Chat prompts add
the base model's chat template (its SHA-256) and the stop tokens it ends a turn with, which the grader pins from the
base tokenizer at start (`pin_chat`): a changed template is a different score identity.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator


class EvalConfig(BaseModel):
    """How a checkpoint is evaluated. Greedy decoding unless `temperature` > 0."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    prompt_format: str = "default"  # a name from the benchmark's `prompt_formats` ("default" = Sample.prompt)
    few_shot: int = Field(default=0, ge=0, le=64)  # exemplars drawn from the *train* split, never test
    temperature: float = Field(default=0.0, ge=0.0, le=5.0)  # 0 = greedy
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    seed: int = 0  # sampling, few-shot exemplar choice and bootstrap resampling
    max_new_tokens: int | None = Field(default=None, ge=1, le=8192)  # None = the benchmark's budget
    batch_size: int = Field(default=64, ge=1, le=4096)
    limit: int | None = Field(default=None, ge=1)  # evaluate only the first `limit` samples
    bootstrap_resamples: int = Field(default=1000, ge=100, le=100_000)
    engine: str = (
        "auto"  # a name in grader.engines.ENGINES; auto = the most capable one available (vLLM on a GPU)
    )
    # "chat": the benchmark's prompt (in `prompt_format`) as the user turn of the BASE model's chat template
    prompt_style: Literal["plain", "chat"] = "plain"
    system_prompt: str | None = Field(default=None, max_length=8192)  # chat only: a system turn first
    # pinned by the grader from the base tokenizer (pin_chat); a config that names other values is refused
    chat_template_sha256: str | None = Field(default=None, pattern=r"^[0-9a-f]{64}$")
    stop_tokens: tuple[
        str, ...
    ] = ()  # the template's end-of-turn tokens; generation stops at them and at EOS

    @model_validator(mode="after")
    def _chat_fields(self) -> EvalConfig:
        if self.prompt_style == "plain" and (
            self.system_prompt or self.chat_template_sha256 or self.stop_tokens
        ):
            raise ValueError("system_prompt, chat_template_sha256 and stop_tokens need prompt_style='chat'")
        return self

    @field_validator("engine")
    @classmethod
    def _engine(cls, value: str) -> str:
        from grader.engines import ENGINES

        return ENGINES.check(value)

    @property
    def do_sample(self) -> bool:
        return self.temperature > 0.0

    def identity(self) -> str:
        """Stable hash of every field that can change a score (the engine is left out: same decoding, same score)."""
        fields = self.model_dump(exclude={"engine", "batch_size"})
        for name in _CHAT_FIELDS:  # plain prompts keep the identities they had before chat prompts existed
            if fields[name] == type(self).model_fields[name].default:
                del fields[name]
        blob = json.dumps(fields, sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(blob.encode()).hexdigest()[:16]


_CHAT_FIELDS = ("prompt_style", "system_prompt", "chat_template_sha256", "stop_tokens")


def pin_chat(config: EvalConfig, base_tokenizer: Any) -> EvalConfig:
    """`config` with the base model's chat template hash and stop tokens filled in (chat prompts only).

    Raises ValueError when the config already names a different template: the base model's tokenizer changed
    since the scores under that config were made."""
    if config.prompt_style != "chat":
        return config
    from tasks.chat import ChatPrompts

    chat = ChatPrompts.of(base_tokenizer, config.system_prompt)
    if config.chat_template_sha256 not in (None, chat.sha256):
        raise ValueError(
            "eval.chat_template_sha256 does not match the base model's chat template; the base tokenizer "
            "changed, so its scores are not comparable: drop the field to pin the current template"
        )
    if config.stop_tokens and list(config.stop_tokens) != chat.stop_tokens:
        raise ValueError(
            f"eval.stop_tokens {list(config.stop_tokens)} differ from the base template's {chat.stop_tokens}; "
            "drop the field to pin the template's own"
        )
    return config.model_copy(
        update={"chat_template_sha256": chat.sha256, "stop_tokens": tuple(chat.stop_tokens)}
    )


class CheckpointLimits(BaseModel):
    """What a submitted folder may contain before the grader even opens it."""

    model_config = ConfigDict(extra="forbid")

    max_total_bytes: int = Field(default=20 * 1024**3, ge=1)
    max_files: int = Field(default=64, ge=1)


class IntegrityConfig(BaseModel):
    """Checks run at every submission: test items in what the trial wrote, weights too close to the base or to an
    earlier submission. A flagged submission keeps its score but can never become the run's best."""

    model_config = ConfigDict(extra="forbid")

    ngram: int = Field(default=13, ge=4, le=64)  # word n-gram length, as in large-model decontamination
    # flag when at least max(min_items, ceil(min_fraction * evaluated test items)) items are found
    min_fraction: float = Field(default=0.02, gt=0.0, le=1.0)
    min_items: int = Field(default=3, ge=1)
    max_file_bytes: int = Field(default=2 * 1024**2, ge=1024)  # read at most this much of each text file
    max_total_bytes: int = Field(default=16 * 1024**2, ge=1024)  # and this much of the whole trial folder
    max_files: int = Field(default=2000, ge=1)
    copy_epsilon: float = Field(
        default=1e-3, ge=0.0
    )  # most-moved tensor's relative L2 distance to the base below this: a copy
    near_duplicate_epsilon: float = Field(default=1e-3, ge=0.0)  # same, to an earlier submission (sampled)


class GraderConfig(BaseModel):
    """`python -m grader serve --config FILE`: FILE is this model as JSON."""

    model_config = ConfigDict(extra="forbid")

    run_id: str = Field(min_length=1, max_length=128)
    benchmark: str
    base_model: Path  # HF checkpoint folder the run starts from; the baseline is its score
    private_dir: Path  # grader-only: test.jsonl, store.db, grader.log; never inside an allowed root
    scores_mirror: Path | None = None  # scores.json for people; written atomically, never read back
    token: str = Field(min_length=8)
    host: str = "127.0.0.1"
    port: int = Field(default=8765, ge=0, le=65535)
    allowed_roots: list[Path] = Field(min_length=1)  # submissions must resolve inside one of these
    max_submissions: int | None = Field(default=None, ge=1)
    min_interval_s: float = Field(default=0.0, ge=0.0)
    public_fraction: float | None = Field(default=None, ge=0.0, lt=1.0)  # Kaggle-style public share of test
    split_seed: int = 0  # which test samples are public
    # draws the hidden test split; None: a secret the grader keeps in private_dir (created once, reused on restart)
    test_seed: int | None = None
    # how the run's trials are kept from this grader ("container", "namespaces", "none"; "unknown" when the
    # caller does not say, e.g. `rlloop grade serve` for an outside agent); stamped on every score
    isolation: str = Field(default="unknown", pattern=r"^[a-z]+$")
    eval: EvalConfig = Field(default_factory=EvalConfig)
    limits: CheckpointLimits = Field(default_factory=CheckpointLimits)
    integrity: IntegrityConfig = Field(default_factory=IntegrityConfig)
    torch_threads: int | None = Field(default=None, ge=1)
    max_crash_retries: int = Field(default=1, ge=0)  # re-evaluations of a submission the grader died during

    @field_validator("run_id")
    @classmethod
    def _safe_run_id(cls, value: str) -> str:
        if not all(c.isalnum() or c in "-_." for c in value):
            raise ValueError("run_id may only contain letters, digits, '-', '_' and '.'")
        return value

    @model_validator(mode="after")
    def _private_dir_outside_roots(self) -> GraderConfig:
        private = self.private_dir.resolve()
        for root in self.allowed_roots:
            resolved = root.resolve()
            if private == resolved or resolved in private.parents or private in resolved.parents:
                raise ValueError(
                    f"private_dir {self.private_dir} overlaps allowed root {root}; "
                    "put the grader's private folder outside every submission root"
                )
        return self

    @property
    def split_enabled(self) -> bool:
        return bool(self.public_fraction)

    @classmethod
    def from_file(cls, path: Path) -> GraderConfig:
        """Read and validate a config file; raises ValueError with one readable line on any problem."""
        try:
            raw = Path(path).read_text()
        except OSError as exc:
            raise ValueError(f"cannot read grader config {path}: {exc.strerror}") from None
        try:
            return cls.model_validate_json(raw)
        except ValueError as exc:
            first = str(exc).splitlines()
            detail = "; ".join(line.strip() for line in first[1:3]) if len(first) > 1 else str(exc)
            raise ValueError(f"invalid grader config {path}: {detail}") from None
