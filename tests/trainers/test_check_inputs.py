"""check_inputs: every problem reported with its file and line; good inputs pass; no model is loaded."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
from typer.testing import CliRunner

from trainers.verl.check_inputs import (
    check_data_root,
    check_experience,
    check_inputs,
    check_jsonl,
    check_system_prompt,
)
from trainers.verl.cli import app


def _write(path: Path, text: str) -> Path:
    path.write_text(text)
    return path


def test_good_inputs_pass(tmp_path: Path) -> None:
    root = tmp_path / "data"
    root.mkdir()
    _write(
        root / "train.jsonl",
        '{"id": "a", "prompt": "1+1=", "answer": "2"}\n{"id": "b", "prompt": "2+2=", "answer": "4"}\n',
    )
    _write(
        root / "experience.json",
        json.dumps({"experience": ["Write only the number.", {"text": "Check carries."}]}),
    )
    prompt = _write(tmp_path / "system.txt", "You are careful.\n")
    jsonl = _write(tmp_path / "exp.jsonl", '"one"\n{"text": "two"}\n')
    report = check_inputs([root / "experience.json", jsonl], [prompt], [root])
    assert report.ok, [str(p) for p in report.problems]
    assert len(report.checked) == 4


def test_jsonl_reports_every_bad_line(tmp_path: Path) -> None:
    path = _write(
        tmp_path / "train.jsonl",
        '{"id": "1", "prompt": "1+1=", "answer": "2"}\nnot json\n{"id": "1", "prompt": "", "answer": "3"}\n'
        '{"prompt": "2+2="}\n[1]\n',
    )
    problems = [str(p) for p in check_jsonl(path)]
    assert problems == [
        f"{path}:2: not valid JSON (Expecting value)",
        f"{path}:3: 'prompt' must be a non-empty string",
        f"{path}:3: duplicate id '1' (line 1)",
        f"{path}:4: missing field 'answer'",
        f"{path}:5: expected a JSON object",
    ]


def test_experience_problems_name_lines_and_items(tmp_path: Path) -> None:
    listing = _write(tmp_path / "e.json", '[\n  "keep going",\n  "",\n  "keep going",\n  7\n]\n')
    problems = [str(p) for p in check_experience(listing)]
    assert f"{listing}:3: item 1: empty experience item" in problems
    assert f"{listing}:2: item 2: duplicate item (first at line 2)" in problems
    assert any(p.startswith(f"{listing}:5: item 3:") and "must be a string" in p for p in problems)
    lines = _write(tmp_path / "e.jsonl", '"a"\n{bad\n{"text": "a"}\n{"txt": "b"}\n')
    problems = [str(p) for p in check_experience(lines)]
    assert problems[0] == f"{lines}:2: not valid JSON (Expecting property name enclosed in double quotes)"
    assert f"{lines}:3: duplicate item (first at line 1)" in problems
    assert any(p.startswith(f"{lines}:4: unknown field(s) txt") for p in problems)
    assert [str(p) for p in check_experience(_write(tmp_path / "e.txt", "x"))] == [
        f"{tmp_path / 'e.txt'}: an experience list must be .json or .jsonl"
    ]
    assert "not valid JSON" in str(check_experience(_write(tmp_path / "bad.json", "{\n  oops\n}"))[0])


def test_system_prompt_and_data_root_problems(tmp_path: Path) -> None:
    assert "does not exist" in str(check_system_prompt(tmp_path / "missing.txt")[0])
    assert "empty" in str(check_system_prompt(_write(tmp_path / "blank.txt", "  \n"))[0])
    (tmp_path / "bin.txt").write_bytes(b"\xff\xfe\x00")
    assert "not UTF-8" in str(check_system_prompt(tmp_path / "bin.txt")[0])

    root = tmp_path / "root"
    root.mkdir()
    _write(root / "test.jsonl", "{}\n")
    messages = [str(p) for p in check_data_root(root)]
    assert any("needs train.jsonl or train.parquet" in m for m in messages)
    assert any("hidden test labels" in m for m in messages)
    assert "does not exist" in str(check_data_root(tmp_path / "nowhere")[0])


def test_verl_parquet_columns_checked(tmp_path: Path) -> None:
    root = tmp_path / "root"
    root.mkdir()
    pq.write_table(pa.table({"prompt": ["x"], "data_source": ["arith"]}), root / "train.parquet")
    messages = [str(p) for p in check_data_root(root)]
    assert messages == [f"{root / 'train.parquet'}: missing column(s) reward_model (verl RL format)"]
    _write(root / "valid.parquet", "not parquet")
    assert any("not a readable parquet file" in str(p) for p in check_data_root(root))


def test_cli_exit_codes(tmp_path: Path) -> None:
    runner = CliRunner()
    good = _write(tmp_path / "good.json", '["a"]')
    ok = runner.invoke(app, ["check-inputs", "--experience", str(good)])
    assert ok.exit_code == 0 and "no problems" in ok.output
    bad = runner.invoke(
        app, ["check-inputs", "--experience", str(good), "--system-prompt", str(tmp_path / "x.txt")]
    )
    assert bad.exit_code == 1 and f"{tmp_path / 'x.txt'}: does not exist" in bad.output
    assert runner.invoke(app, ["check-inputs"]).exit_code == 2
