"""A tiny char-level Llama policy for the algorithm tests, built once per test process (~0.8M parameters).

Trained for only 120 steps on arith's train split: it has learned the answer format but gets almost every sum
wrong, so every recipe has room to move its metric within a few dozen steps on a small prompt set.
"""

from __future__ import annotations

import atexit
import functools
import json
import random
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from grader.benchmarks import Sample, get_benchmark
from trainers.tiny import build_char_tokenizer

TRAIN_STEPS = 120
# Fixed here (not read from trainers.tiny's recipe, which is tuned for the demo) so these tests stay calibrated.
ARCH: dict[str, Any] = {
    "hidden_size": 128,
    "intermediate_size": 256,
    "num_hidden_layers": 4,
    "num_attention_heads": 4,
    "num_key_value_heads": 4,
    "max_position_embeddings": 64,
}
BATCH, LR, WARMUP = 64, 3e-3, 30


def _train(seed: int = 0) -> tuple[LlamaForCausalLM, PreTrainedTokenizerFast]:
    """Plain next-token training on arith's train split (prompt + answer + EOS), BOS never predicted."""
    torch.manual_seed(seed)
    tokenizer = build_char_tokenizer()
    config = LlamaConfig(
        vocab_size=len(tokenizer),
        tie_word_embeddings=True,
        pad_token_id=tokenizer.pad_token_id,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        **ARCH,
    )
    model = LlamaForCausalLM(config)
    texts = [s.prompt + s.answer for s in get_benchmark("arith").load("train")]
    encoded = [tokenizer(t)["input_ids"] + [tokenizer.eos_token_id] for t in texts]
    rng = random.Random(seed)
    optimizer = torch.optim.AdamW(model.parameters(), lr=LR, weight_decay=0.0)
    schedule = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: min(1.0, (step + 1) / WARMUP) * max(0.0, 1.0 - step / TRAIN_STEPS) ** 0.5
    )
    model.train()
    for _ in range(TRAIN_STEPS):
        picked = [encoded[i] for i in rng.sample(range(len(encoded)), BATCH)]
        width = max(len(ids) for ids in picked)
        ids = torch.full((BATCH, width), tokenizer.pad_token_id, dtype=torch.long)
        labels = torch.full((BATCH, width), -100, dtype=torch.long)
        for row, seq in enumerate(picked):
            ids[row, : len(seq)] = torch.tensor(seq)
            labels[row, 1 : len(seq)] = torch.tensor(seq[1:])
        loss = model(input_ids=ids, attention_mask=(ids != tokenizer.pad_token_id).long(), labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
        optimizer.zero_grad(set_to_none=True)
    model.eval()
    return model, tokenizer


@functools.cache
def tiny_policy_root() -> Path:
    """Folder with `model/` (the checkpoint), `train8.jsonl` (8 prompts it sometimes solves) and `train64.jsonl`."""
    torch.set_num_threads(1)
    root = Path(tempfile.mkdtemp(prefix="rlloop-tiny-policy-"))
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    model, tokenizer = _train()
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
        do_sample=False,
    )
    model.save_pretrained(root / "model", safe_serialization=True)
    tokenizer.save_pretrained(root / "model")
    train = get_benchmark("arith").load("train")
    sets = {"train8.jsonl": _sometimes_solved(model, tokenizer, train[:256], 8), "train64.jsonl": train[:64]}
    for name, samples in sets.items():
        lines = [json.dumps({"id": s.id, "prompt": s.prompt, "answer": s.answer}) for s in samples]
        (root / name).write_text("\n".join(lines) + "\n")
    return root


def _sometimes_solved(
    model: LlamaForCausalLM, tokenizer: PreTrainedTokenizerFast, candidates: list[Sample], count: int
) -> list[Sample]:
    """The `count` prompts the policy solves most often when sampling (but not always): RL has a signal on them."""
    from trainers.onpolicy import benchmark_reward, sample

    torch.manual_seed(0)
    draws = 16
    rollout = sample(model, tokenizer, [c.prompt for c in candidates for _ in range(draws)], max_new_tokens=6)
    rewards = benchmark_reward("arith")(rollout.texts, [c for c in candidates for _ in range(draws)])
    rates = [sum(rewards[i * draws : (i + 1) * draws]) / draws for i in range(len(candidates))]
    ranked = sorted(range(len(candidates)), key=lambda i: (rates[i] >= 0.75, -rates[i], i))
    return [candidates[i] for i in ranked[:count]]


def logged_history(output_dir: Path) -> list[dict[str, Any]]:
    """The per-step rows a recipe wrote to log_history.jsonl."""
    text = (output_dir / "log_history.jsonl").read_text()
    return [json.loads(line) for line in text.splitlines() if line.strip()]
