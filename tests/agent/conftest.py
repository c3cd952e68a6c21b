from __future__ import annotations

import shutil
from pathlib import Path

import pytest


@pytest.fixture
def tiny_model_home(tmp_path: Path, tiny_model_dir: Path) -> Path:
    """An RLLOOP_HOME whose built-in tiny-arith is already built (built once per session, copied per test)."""
    home = tmp_path / "home"
    shutil.copytree(tiny_model_dir, home / "models" / "tiny-arith")
    return home
