"""trainers.onpolicy's rollouts: which completion tokens count (the mask every on-policy loss is weighted by)."""

from __future__ import annotations

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM

from trainers import onpolicy
from trainers.tiny import build_char_tokenizer

EOS = 2


def test_the_mask_runs_to_the_first_eos_and_over_the_whole_of_a_cut_completion() -> None:
    ids = torch.tensor(
        [
            [5, EOS, 7, EOS],  # ended at 1
            [5, 6, 7, 8],  # never ended: cut at max_new_tokens, every token counts
            [EOS, 6, 7, 8],  # ended at once
        ]
    )
    expected = torch.tensor([[1, 1, 0, 0], [1, 1, 1, 1], [1, 0, 0, 0]])
    assert torch.equal(onpolicy.mask_to_first_eos(ids, EOS), expected)
    assert torch.equal(onpolicy.mask_to_first_eos(ids, None), torch.ones_like(ids))


def test_a_sampled_rollout_counts_every_token_of_a_completion_that_never_ends() -> None:
    """A random policy over a vocabulary much larger than its tokenizer's almost never says EOS: its completions are
    cut at max_new_tokens, and all of their tokens are trained on (the GPU check saw two a completion)."""
    tokenizer = build_char_tokenizer()
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=4096,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=1,
        num_attention_heads=2,
        num_key_value_heads=2,
        max_position_embeddings=64,
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    model = LlamaForCausalLM(config)
    model.generation_config = GenerationConfig(
        bos_token_id=tokenizer.bos_token_id,
        eos_token_id=tokenizer.eos_token_id,
        pad_token_id=tokenizer.pad_token_id,
    )
    rollout = onpolicy.sample(model, tokenizer, ["3+5=", "12+7="] * 4, max_new_tokens=12)
    width = rollout.completion_ids.shape[1]
    for row, mask in zip(rollout.completion_ids, rollout.completion_mask, strict=True):
        ends = (row == tokenizer.eos_token_id).nonzero()
        expected = int(ends[0]) + 1 if len(ends) else width
        assert int(mask.sum()) == expected and bool(mask[:expected].all())
    assert int(rollout.completion_mask.sum()) > 2 * len(rollout.completion_ids)
