"""What the proposers' tests share: a run's workspace holding a benchmark's public train rows."""

from __future__ import annotations

import json
from pathlib import Path

from tasks import get_benchmark


def train_workspace(tmp_path: Path, benchmark: str) -> Path:
    """A workspace whose data/train.jsonl holds `benchmark`'s train rows, as prepare_workspace writes them."""
    data = tmp_path / benchmark / "data"
    data.mkdir(parents=True)
    rows = get_benchmark(benchmark).load("train")
    (data / "train.jsonl").write_text(
        "".join(json.dumps({"prompt": r.prompt, "answer": r.answer}) + "\n" for r in rows)
    )
    return data.parent
