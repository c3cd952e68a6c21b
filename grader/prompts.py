"""Chat prompts in the grader: which renderer an evaluation uses and which token ids end a generated turn.

The renderer is always built from the tokenizer the grader hands in (the BASE model's; a submission's own tokenizer
files are never used to render), and it must match the template hash pinned in the eval config (`pin_chat`).
"""

from __future__ import annotations

from typing import Any, Protocol

from tasks.chat import ChatPrompts


class PromptSettings(Protocol):
    """The part of an eval config (`grader.config.EvalConfig` is one) that decides how prompts are rendered and
    where a turn ends. A protocol, so this module (below grader.config, which checks engine names against
    grader.engines, which imports this) never imports the config."""

    @property
    def prompt_style(self) -> str: ...

    @property
    def system_prompt(self) -> str | None: ...

    @property
    def chat_template_sha256(self) -> str | None: ...

    @property
    def stop_tokens(self) -> tuple[str, ...]: ...


def chat_renderer(config: PromptSettings, tokenizer: Any) -> ChatPrompts | None:
    """The renderer for a chat-style evaluation (None for plain prompts); refuses a template other than the pinned
    one, so a score is never made with a template its config does not name."""
    if config.prompt_style != "chat":
        return None
    if tokenizer is None:
        raise ValueError("chat prompts need the base model's tokenizer; pass tokenizer= to the evaluation")
    chat = ChatPrompts.of(tokenizer, config.system_prompt)
    if config.chat_template_sha256 not in (None, chat.sha256):
        raise ValueError(
            "the tokenizer's chat template is not the one this eval config pins (chat_template_sha256); "
            "prompts are rendered with the base model's template only"
        )
    return chat


def stop_token_ids(tokenizer: Any, config: PromptSettings) -> list[int]:
    """EOS and the config's end-of-turn tokens as ids, EOS first (engines pass them as eos / stop_token_ids)."""
    ids: list[int] = []
    for token_id in [
        tokenizer.eos_token_id,
        *(tokenizer.convert_tokens_to_ids(t) for t in config.stop_tokens),
    ]:
        usable = isinstance(token_id, int) and token_id != getattr(tokenizer, "unk_token_id", None)
        if usable and token_id not in ids:
            ids.append(token_id)
    return ids
