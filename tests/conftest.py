"""Fixtures shared by every package's tests."""

from __future__ import annotations

from pathlib import Path

import pytest


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-arith, built once per test session into a temp dir (the real recipe, so it has its weak baseline)."""
    import torch

    from trainers.tiny import build_tiny_arith

    torch.set_num_threads(1)
    return build_tiny_arith(tmp_path_factory.mktemp("models") / "tiny-arith", seed=0, progress=False)


@pytest.fixture(scope="session")
def tiny_chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-chat (BPE tokenizer, chat template, Qwen2), built once per test session with the real recipe."""
    import torch

    from trainers.tiny_chat import build_tiny_chat

    torch.set_num_threads(1)
    return build_tiny_chat(tmp_path_factory.mktemp("models") / "tiny-chat", seed=0, progress=False)
