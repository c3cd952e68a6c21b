"""`tiny-chat`: a built-in base model shaped like the models users bring (Qwen2.5-Instruct), built locally in a minute.

tiny-arith (trainers/tiny.py) has a character tokenizer and plain prompts; real models take other code paths: a
byte-level BPE tokenizer, special tokens added on top of the vocabulary, a Jinja chat template, eos = the
end-of-turn token and pad a different special token, tied embeddings. tiny-chat has all of them: a Qwen2 config, a
BPE tokenizer trained here with `tokenizers` on the public train text of arith, gsm8k and countdown, and Qwen's
ChatML template (`<|im_start|>role\\n...<|im_end|>\\n`, system turn optional). It is pretrained briefly on those
train splits written as chat turns, so it knows the format but is far from solving the problems.

Same seed, same bytes on one machine (the build runs on `torch_threads` threads; data order from a seeded
`random.Random`; the BPE trainer is deterministic); rlloop_model.json records the recipe and the environment.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import torch
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen2Config, Qwen2ForCausalLM

from trainers.tiny import build_and_save, fit, model_shape

ENDOFTEXT, IM_START, IM_END = "<|endoftext|>", "<|im_start|>", "<|im_end|>"
SPECIAL_TOKENS = [ENDOFTEXT, IM_START, IM_END]
# Qwen2's pre-tokenizer split: one digit per token, words with their leading space, punctuation runs, newlines.
QWEN_SPLIT = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
# Qwen2.5-Instruct's ChatML layout, without its default system prompt: a system turn only when one is given.
CHAT_TEMPLATE = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@dataclass(frozen=True)
class TinyChatRecipe:
    """How tiny-chat is built; recorded in its rlloop_model.json."""

    name: str = "tiny-chat"
    architecture: str = "Qwen2ForCausalLM"
    vocab_size: int = 2048  # BPE merges learned up to this size (special tokens included)
    hidden_size: int = 160
    intermediate_size: int = 448
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2  # grouped-query attention, as Qwen2.5 has it
    max_position_embeddings: int = 1024
    max_train_tokens: int = 160  # pretraining sequences are cut here (the gsm8k solutions are the long ones)
    train_steps: int = 200
    batch_size: int = 16
    learning_rate: float = 2e-3
    warmup_steps: int = 20
    tokenizer_texts: int = 4000  # train-split samples per benchmark the BPE is learned from
    torch_threads: int = 1


TINY_CHAT_RECIPE = TinyChatRecipe()
_BUCKET = 8  # batches drawn together and cut by length


def _train_samples() -> list[tuple[str, str]]:
    """(user turn, assistant turn) pairs from the public train splits only (never valid or test)."""
    from tasks import get_benchmark

    pairs: list[tuple[str, str]] = []
    for sample in get_benchmark("arith").load("train"):
        pairs.append((sample.prompt, sample.answer))
    for sample in get_benchmark("gsm8k").load("train"):
        pairs.append((sample.prompt, str(sample.meta.get("solution", sample.answer))))
    for sample in get_benchmark("countdown").load("train"):
        pairs.append((sample.prompt, sample.answer))
    return pairs


def chat_text(user: str, assistant: str) -> str:
    """One conversation as the template renders it (no system turn), ending in the end-of-turn token."""
    return f"{IM_START}user\n{user}{IM_END}\n{IM_START}assistant\n{assistant}{IM_END}\n"


def build_bpe_tokenizer(pairs: list[tuple[str, str]]) -> PreTrainedTokenizerFast:
    """A byte-level BPE (GPT-2/Qwen style) learned from `pairs`, with Qwen's special tokens and chat template."""
    r = TINY_CHAT_RECIPE
    backend = Tokenizer(models.BPE())
    backend.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(QWEN_SPLIT), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    backend.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=r.vocab_size,
        min_frequency=2,
        special_tokens=SPECIAL_TOKENS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )

    chosen = _spread(pairs, r.tokenizer_texts * 3)
    backend.train_from_iterator(
        (text for user, assistant in chosen for text in (user, assistant)), trainer=trainer
    )
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token=IM_END,
        pad_token=ENDOFTEXT,
        additional_special_tokens=[IM_START, IM_END],
        clean_up_tokenization_spaces=False,
        model_max_length=r.max_position_embeddings,
        chat_template=CHAT_TEMPLATE,
        split_special_tokens=False,
    )


def _spread(pairs: list[tuple[str, str]], count: int) -> list[tuple[str, str]]:
    """Every k-th pair, so the tokenizer sees all three benchmarks in proportion (deterministic, no RNG)."""
    step = max(1, len(pairs) // count)
    return pairs[::step]


def _model_config(tokenizer: PreTrainedTokenizerFast) -> Qwen2Config:
    return Qwen2Config(**model_shape(TINY_CHAT_RECIPE, tokenizer))  # bos None: Qwen has no BOS


def _batches(
    tokenizer: PreTrainedTokenizerFast, pairs: list[tuple[str, str]], *, steps: int, seed: int
) -> Iterator[tuple[torch.Tensor, torch.Tensor]]:
    """Right-padded chat conversations; the loss covers every real token (the model learns the layout too).

    Batches are drawn in groups of `_BUCKET` and each group is cut by length, so a short arith turn is rarely padded
    to the width of a gsm8k solution (most of the compute would otherwise go to padding)."""
    r = TINY_CHAT_RECIPE
    rng = random.Random(seed)
    order: list[int] = []
    pad = tokenizer.pad_token_id
    ready: list[list[list[int]]] = []
    for _ in range(steps):
        if not ready:
            need = r.batch_size * _BUCKET
            while len(order) < need:
                fresh = list(range(len(pairs)))
                rng.shuffle(fresh)
                order.extend(fresh)
            group = [
                tokenizer(chat_text(*pairs[i]), add_special_tokens=False)["input_ids"][: r.max_train_tokens]
                for i in order[:need]
            ]
            del order[:need]
            group.sort(key=len)
            ready = [group[k : k + r.batch_size] for k in range(0, need, r.batch_size)]
            rng.shuffle(ready)
        encoded = ready.pop()
        width = max(len(e) for e in encoded)
        ids = torch.full((len(encoded), width), pad, dtype=torch.long)
        labels = torch.full((len(encoded), width), -100, dtype=torch.long)
        for row, seq in enumerate(encoded):
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, : len(seq)] = torch.tensor(seq)
        yield ids, labels


def train_tiny_chat(
    *, seed: int = 0, steps: int | None = None, progress: bool = True
) -> tuple[Qwen2ForCausalLM, PreTrainedTokenizerFast, dict[str, float]]:
    """Tokenizer and model, trained in memory; returns (model, tokenizer, stats)."""
    r = TINY_CHAT_RECIPE
    n_steps = steps if steps is not None else r.train_steps
    torch.manual_seed(seed)
    pairs = _train_samples()
    tokenizer = build_bpe_tokenizer(pairs)
    model = Qwen2ForCausalLM(_model_config(tokenizer))
    stats = fit(
        model,
        _batches(tokenizer, pairs, steps=n_steps, seed=seed),
        pad_token_id=tokenizer.pad_token_id,  # <|endoftext|> never occurs inside a conversation
        learning_rate=r.learning_rate,
        weight_decay=0.0,
        warmup_steps=r.warmup_steps,
        label="tiny-chat",
        every=25,
        total=n_steps,
        progress=progress,
    )
    return model, tokenizer, stats


def build_tiny_chat(out_dir: Path, *, seed: int = 0, progress: bool = True, steps: int | None = None) -> Path:
    """Build tiny-chat into `out_dir` (replacing what is there); the caller's torch thread count is restored."""
    return build_and_save(
        out_dir,
        recipe=TINY_CHAT_RECIPE,
        seed=seed,
        train=lambda: train_tiny_chat(seed=seed, steps=steps, progress=progress),
        about={
            "data": "train splits of arith, gsm8k and countdown as ChatML conversations; loss on every token",
            "test_free": "tokenizer and weights see the train splits only",
            "built_by": "trainers.tiny_chat.build_tiny_chat",
        },
        progress=progress,
    )
