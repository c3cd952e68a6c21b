"""Fixtures shared by every package's tests.

The models below are built once per test run, whatever the number of pytest-xdist workers: the first worker to
need one builds it (`tasks.once.make_once`, under a lock) into a folder every worker of the run shares, and the
others wait for it and use it.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest

from tasks import once
from tests.support.schedule import (  # noqa: F401  (pytest's hooks, by name: longest files first)
    pytest_collection_modifyitems,
    pytest_runtest_logreport,
    pytest_sessionfinish,
)


def shared_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder shared by every xdist worker of this test run (the session's own temp folder without xdist)."""
    base = tmp_path_factory.getbasetemp()
    return base.parent if base.name.startswith("popen-gw") else base


def build_once(tmp_path_factory: pytest.TempPathFactory, name: str, build: Callable[[Path], object]) -> Path:
    """`build(folder)` run once per test run into the shared folder `name`; every caller gets the finished one."""
    root = shared_dir(tmp_path_factory) / "shared-models"
    target = root / name
    once.make_once(
        target, build, ready=lambda p: (p / "config.json").is_file(), lock=root / ".locks" / f"{name}.lock"
    )
    return target


@pytest.fixture(scope="session")
def tiny_model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-arith, built once per test run (the real recipe, so it has its weak baseline)."""
    import torch

    from trainers.tiny import build_tiny_arith

    torch.set_num_threads(1)
    return build_once(
        tmp_path_factory, "tiny-arith", lambda path: build_tiny_arith(path, seed=0, progress=False)
    )


@pytest.fixture(scope="session")
def tiny_chat_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """tiny-chat (BPE tokenizer, chat template, Qwen2), built once per test run with the real recipe."""
    import torch

    from trainers.tiny_chat import build_tiny_chat

    torch.set_num_threads(1)
    return build_once(
        tmp_path_factory, "tiny-chat", lambda path: build_tiny_chat(path, seed=0, progress=False)
    )
