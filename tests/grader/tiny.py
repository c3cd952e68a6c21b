"""Tiny random char-level Llama checkpoints for grader tests (a random model scores ~0; tests only need it to run)."""

from __future__ import annotations

from pathlib import Path

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from trainers.tiny import build_char_tokenizer


def make_tiny_model(out_dir: Path, *, seed: int = 0, hidden: int = 32, layers: int = 2) -> Path:
    """Save a random tiny Llama + char tokenizer to `out_dir` (safetensors) and return the folder."""
    tokenizer = build_char_tokenizer()
    tokenizer.model_max_length = 512
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        hidden_size=hidden,
        intermediate_size=hidden * 2,
        num_hidden_layers=layers,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=512,
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
    )
    model = LlamaForCausalLM(config)
    out_dir.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out_dir, safe_serialization=True)
    tokenizer.save_pretrained(out_dir)
    return out_dir
