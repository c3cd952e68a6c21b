"""Chat prompts: a benchmark's prompt as the user turn of a model's own chat template, one renderer for the grader
and the trainers, so the prompts a model is trained on and the prompts it is scored on are the same text.

"plain" hands the benchmark's prompt to the model as it is; "chat" renders `[system?, user: prompt]` with the
template and the generation prompt (`<|im_start|>assistant\\n` for ChatML). The end-of-turn token(s) that close an
assistant reply in that template are found by rendering one, not by a list of known names; generation stops at
them, and SFT completions end with the first one so the loss teaches the model to stop.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any, Literal

PromptStyle = Literal["plain", "chat"]
PROMPT_STYLES: tuple[str, ...] = ("plain", "chat")
_MARKER = "\x00rlloop-reply\x00"


class ChatTemplateError(ValueError):
    """A chat prompt was asked of a tokenizer that has no usable chat template."""


def chat_template_of(tokenizer: Any) -> str | None:
    """The tokenizer's default chat template text (a named set's "default" entry), or None."""
    template = getattr(tokenizer, "chat_template", None)
    if isinstance(template, dict):
        template = template.get("default")
    return template if isinstance(template, str) and template.strip() else None


def template_sha256(template: str) -> str:
    return hashlib.sha256(template.encode("utf-8")).hexdigest()


def _messages(prompt: str, system_prompt: str | None) -> list[dict[str, str]]:
    turns = [{"role": "system", "content": system_prompt}] if system_prompt else []
    return [*turns, {"role": "user", "content": prompt}]


@dataclass(frozen=True)
class ChatPrompts:
    """Renders prompts with one tokenizer's chat template; `stop_tokens` end an assistant turn in it."""

    tokenizer: Any
    template: str
    system_prompt: str | None = None

    @classmethod
    def of(cls, tokenizer: Any, system_prompt: str | None = None) -> ChatPrompts:
        template = chat_template_of(tokenizer)
        if template is None:
            raise ChatTemplateError(
                f"the model's tokenizer ({getattr(tokenizer, 'name_or_path', '?')}) has no chat template; "
                "use --prompt-format plain, or a model that ships one (e.g. tiny-chat, an -Instruct model)"
            )
        return cls(tokenizer=tokenizer, template=template, system_prompt=system_prompt or None)

    @property
    def sha256(self) -> str:
        return template_sha256(self.template)

    def render(self, prompt: str) -> str:
        """`prompt` as the user turn (after the system turn, if any), followed by the assistant's generation prompt."""
        text = self.tokenizer.apply_chat_template(
            _messages(prompt, self.system_prompt),
            chat_template=self.template,
            tokenize=False,
            add_generation_prompt=True,
        )
        return str(text)

    @property
    def stop_tokens(self) -> list[str]:
        """The special tokens that directly follow an assistant reply in this template (`<|im_end|>` for ChatML),
        then EOS if it is another token: generation stops at any of them."""
        turns = [*_messages("q", self.system_prompt), {"role": "assistant", "content": _MARKER}]
        rendered = str(self.tokenizer.apply_chat_template(turns, chat_template=self.template, tokenize=False))
        after = rendered.partition(_MARKER)[2]
        special = set(getattr(self.tokenizer, "all_special_tokens", []))
        special |= {str(t) for t in getattr(self.tokenizer, "added_tokens_decoder", {}).values()}
        found: list[str] = []
        for token in self.tokenizer.tokenize(after)[:2]:
            if token not in special:
                break
            found.append(token)
        eos = getattr(self.tokenizer, "eos_token", None)
        if isinstance(eos, str) and eos and eos not in found:
            found.append(eos)
        return found

    @property
    def end_of_turn(self) -> str:
        """The token an SFT completion ends with, so the loss covers stopping as the template stops."""
        return self.stop_tokens[0]


def chat_prompts_for(
    tokenizer: Any, prompt_style: str, system_prompt: str | None = None
) -> ChatPrompts | None:
    """The renderer for `prompt_style` ("chat"), or None for plain prompts."""
    if prompt_style not in PROMPT_STYLES:
        raise ValueError(f"unknown prompt format {prompt_style!r}; use one of {list(PROMPT_STYLES)}")
    return ChatPrompts.of(tokenizer, system_prompt) if prompt_style == "chat" else None
