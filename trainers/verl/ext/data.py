"""The off-policy stages' CPU data steps around verl's generation server and SFT trainer (pandas only, no verl).

`add-context`: the teacher's prompts, the experience list or system prompt put in front as a system turn (the
student's prompt kept in `student_prompt`). `to-sft`: generation output rows -> verl SFT rows, one chat
`messages` list per response: the student's prompt (without the context), then the response as the assistant turn.
Usage: python -m trainers.verl.ext.data add-context --context F --input P --output Q
       python -m trainers.verl.ext.data to-sft --input P --output Q
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pandas as pd

Turn = dict[str, str]


def context_text(path: Path) -> str:
    """A system prompt file's text, or an experience list (.json list / {"experience": [...]}, .jsonl) as lines."""
    text = path.read_text(encoding="utf-8")
    if path.suffix == ".jsonl":
        items: Any = [json.loads(line) for line in text.splitlines() if line.strip()]
    elif path.suffix == ".json":
        items = json.loads(text)
        items = items.get("experience", []) if isinstance(items, dict) else items
    else:
        return text.strip()
    return "\n".join(f"- {i.get('text') if isinstance(i, dict) else i}" for i in items)


def _turns(prompt: Any) -> list[Turn]:
    """A verl prompt cell (a chat list, possibly a numpy array of dicts, or a plain string) as chat turns."""
    if isinstance(prompt, str):
        return [{"role": "user", "content": prompt}]
    return [{"role": str(t["role"]), "content": str(t["content"])} for t in list(prompt)]


def add_context(frame: pd.DataFrame, context: str) -> pd.DataFrame:
    out = frame.copy()
    out["student_prompt"] = [_turns(p) for p in frame["prompt"]]
    out["prompt"] = [[{"role": "system", "content": context}, *_turns(p)] for p in frame["prompt"]]
    return out


def to_sft(frame: pd.DataFrame) -> pd.DataFrame:
    column = "student_prompt" if "student_prompt" in frame else "prompt"
    rows = [
        {"messages": [*_turns(prompt), {"role": "assistant", "content": str(response)}]}
        for prompt, responses in zip(frame[column], frame["responses"], strict=True)
        for response in ([responses] if isinstance(responses, str) else list(responses))
    ]
    return pd.DataFrame(rows)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m trainers.verl.ext.data", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add = commands.add_parser("add-context", help="the teacher's prompts: the context as a system turn")
    add.add_argument("--context", type=Path, required=True)
    sft = commands.add_parser(
        "to-sft", help="generation output -> chat `messages` rows for verl's SFT trainer"
    )
    for sub in (add, sft):
        sub.add_argument("--input", type=Path, required=True)
        sub.add_argument("--output", type=Path, required=True)
    args = parser.parse_args(argv)
    frame = pd.read_parquet(args.input)
    if "prompt" not in frame:
        parser.error(f"{args.input}: no `prompt` column (verl's RL parquet format has one)")
    if args.command == "add-context":
        result = add_context(frame, context_text(args.context))
    elif "responses" not in frame:
        parser.error(f"{args.input}: no `responses` column: give the generation server's output")
    else:
        result = to_sft(frame)
    args.output.parent.mkdir(parents=True, exist_ok=True)
    result.to_parquet(args.output)


if __name__ == "__main__":
    main()
