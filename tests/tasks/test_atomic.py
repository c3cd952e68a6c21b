"""The one atomic writer: whole files or none, no temp files left, a plain file mode."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from tasks.atomic import atomic_write, atomic_write_json, atomic_write_lines, atomic_write_text


def test_writes_replace_whole_files_with_a_plain_mode(tmp_path: Path) -> None:
    target = tmp_path / "deep" / "state.json"
    atomic_write_json(target, {"b": 1, "a": Path("/x")}, sort_keys=True)
    assert json.loads(target.read_text()) == {"a": "/x", "b": 1}
    assert target.read_text().endswith("}\n")
    mask = os.umask(0)
    os.umask(mask)
    assert target.stat().st_mode & 0o777 == 0o666 & ~mask
    atomic_write_text(target, "new", mode=0o600)
    assert target.read_text() == "new" and target.stat().st_mode & 0o777 == 0o600
    atomic_write_lines(tmp_path / "rows.jsonl", ['{"id": 1}', '{"id": 2}'])
    assert (tmp_path / "rows.jsonl").read_text() == '{"id": 1}\n{"id": 2}\n'


def test_a_failed_write_keeps_the_old_file_and_leaves_no_temp(tmp_path: Path) -> None:
    target = tmp_path / "scores.json"
    target.write_text("old")

    def half(handle: object) -> None:
        handle.write("half")  # type: ignore[attr-defined]
        raise RuntimeError("disk full")

    with pytest.raises(RuntimeError, match="disk full"):
        atomic_write(target, half)
    assert target.read_text() == "old"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["scores.json"]
