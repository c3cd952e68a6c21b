"""Workspace JSONL (`{"id","prompt","answer"}` per line) into Hugging Face datasets, in the shapes TRL expects.

With `prompt_format="chat"` every prompt is rendered as the user turn of the model's chat template by the same
renderer the grader uses (tasks.chat), so a model is trained on exactly the text it is scored on, and SFT
completions end with the template's end-of-turn token so the loss teaches the model to stop there.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

from transformers import PreTrainedTokenizerBase

from tasks.answers import extract_number
from tasks.base import Verifier
from tasks.chat import ChatPrompts
from tasks.jsonl import json_lines
from trainers.schedule import mark

if TYPE_CHECKING:  # `datasets` costs a second of every trial's start-up: imported by the TRL recipes only
    from datasets import Dataset


T = TypeVar("T")


class DataFileError(ValueError):
    """A training file that cannot be used; the message names the file and line and says what to fix."""


def batches(items: Sequence[T], size: int, seed: int) -> Callable[[], list[T]]:
    """An endless shuffled stream of `size`-item batches (reshuffled each epoch)."""
    rng = random.Random(seed)
    order: list[int] = []

    def next_batch() -> list[T]:
        while len(order) < size:
            fresh = list(range(len(items)))
            rng.shuffle(fresh)
            order.extend(fresh)
        picked = [items[i] for i in order[:size]]
        del order[:size]
        return picked

    return next_batch


def chat_prompts(config: Any) -> ChatPrompts | None:
    """The chat renderer a recipe config asks for (`prompt_format`, `system_prompt`, the model's own tokenizer at
    `model_path`), or None for plain prompts."""
    if getattr(config, "prompt_format", "plain") != "chat":
        return None
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(Path(config.model_path))
    return ChatPrompts.of(tokenizer, getattr(config, "system_prompt", None))


@dataclass(frozen=True)
class RowMoves:
    """The train-row choices of a recipe config (`trainers.config.TrainRowChoices`), applied to raw rows (prompts
    as written, before any chat rendering): answers reformatted, then rows the benchmark's verifier rejects
    dropped. Each change is logged with how many rows it touched."""

    benchmark: str
    answer_format: str = "as_given"
    filter_by_verifier: bool = False

    @classmethod
    def of(cls, config: Any) -> RowMoves | None:
        """The moves `config` asks for; None when it asks for none (or its recipe has no such fields)."""
        moves = cls(
            benchmark=str(getattr(config, "benchmark", "")),
            answer_format=str(getattr(config, "answer_format", "as_given")),
            filter_by_verifier=bool(getattr(config, "filter_by_verifier", False)),
        )
        return None if moves == cls(benchmark=moves.benchmark) else moves

    def apply(self, rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
        from trainers.runtime import log

        if self.answer_format == "final_number":
            numbers = [(row, extract_number(row["answer"])) if row["answer"] else (row, "") for row in rows]
            kept = [{**row, "answer": number} for row, number in numbers if number is not None]
            log(
                f"answer_format=final_number: {len(kept)} rows kept, {len(rows) - len(kept)} without a number dropped"
            )
            rows = kept
        if self.filter_by_verifier:
            verifier = self.verifier()
            kept = [
                row
                for row in rows
                if not row["answer"] or verifier.verify(row["answer"], row["prompt"]) >= 1.0
            ]
            labelled = sum(1 for row in rows if row["answer"])
            log(
                f"filter_by_verifier: {labelled - (len(rows) - len(kept))} of {labelled} answers verified, "
                f"{len(rows) - len(kept)} wrong ones dropped"
            )
            rows = kept
        if not rows:
            raise DataFileError(f"{path}: no rows left after {self}; nothing to train on")
        return rows

    def verifier(self) -> Verifier:
        """The benchmark's exact verifier; DataFileError when it has none (its score needs the answer column)."""
        from tasks import get_benchmark

        bench = get_benchmark(self.benchmark)
        if not isinstance(bench, Verifier):
            raise DataFileError(
                f"filter_by_verifier: benchmark {self.benchmark!r} has no verifier (its score compares with the "
                "answer column, so it would keep every row); set filter_by_verifier=false"
            )
        return bench


def read_jsonl(
    path: Path,
    *,
    limit: int | None = None,
    chat: ChatPrompts | None = None,
    moves: RowMoves | None = None,
) -> list[dict[str, Any]]:
    """Rows of a workspace JSONL file; each must be an object with string `prompt` and `answer`. With `moves`, the
    first `limit` rows as the config's train-row choices leave them; with `chat`, each prompt is returned rendered
    in the chat template."""
    if not path.is_file():
        raise DataFileError(f"train_file {path} does not exist; use the workspace's data/train.jsonl")
    rows: list[dict[str, Any]] = []
    for number, row in json_lines(
        path,
        lambda number, exc: DataFileError(
            f"{path}:{number}: not valid JSON ({exc.msg}); one object per line"
        ),
    ):
        if not isinstance(row, dict) or not isinstance(row.get("prompt"), str) or "answer" not in row:
            raise DataFileError(f'{path}:{number}: each line needs string "prompt" and "answer" fields')
        rows.append({"id": str(row.get("id", number)), "prompt": row["prompt"], "answer": str(row["answer"])})
        if limit is not None and len(rows) >= limit:
            break
    if not rows:
        raise DataFileError(f"{path} has no samples; it must hold one JSON object per line")
    if moves is not None:
        rows = moves.apply(rows, path)
    if chat is not None:
        rows = [{**row, "prompt": chat.render(row["prompt"])} for row in rows]
    return rows


def labelled_rows(rows: list[dict[str, Any]], path: Path) -> list[dict[str, Any]]:
    """The rows that carry an answer; the others (prompts alone, answer "") are logged as skipped."""
    from trainers.runtime import log

    kept = [row for row in rows if row["answer"]]
    if len(kept) < len(rows):
        log(f"{len(rows) - len(kept)} of {len(rows)} rows have no answer: skipped for supervised training")
    if not kept:
        raise DataFileError(
            f"{path}: no row has an answer; train on the prompts with a recipe that needs none (grpo, opo, rft)"
        )
    return kept


def prompt_completion_dataset(
    path: Path, *, max_samples: int | None = None, chat: ChatPrompts | None = None
) -> Dataset:
    """For SFT: `prompt` and `completion` (the answer) columns, so the loss covers the completion only; in chat
    format the completion ends with the end-of-turn token, which is inside the loss mask. Rows without an answer are
    skipped."""
    rows = labelled_rows(read_jsonl(path, limit=max_samples, chat=chat), path)
    end = chat.end_of_turn if chat is not None else ""
    from datasets import Dataset

    dataset = Dataset.from_dict(
        {"prompt": [r["prompt"] for r in rows], "completion": [r["answer"] + end for r in rows]}
    )
    mark("data")
    return dataset


_TOKENIZED: dict[
    tuple[str, ...], Dataset
] = {}  # this process's tokenized SFT sets, by content (a warm trial's)


def tokenizer_fingerprint(tokenizer: PreTrainedTokenizerBase) -> str:
    """A digest of what decides how a tokenizer splits text: its vocabulary and rules, special tokens, settings."""
    backend = getattr(tokenizer, "backend_tokenizer", None)
    rules = backend.to_str() if backend is not None else repr(sorted(tokenizer.get_vocab().items()))
    special = json.dumps(
        [tokenizer.eos_token, tokenizer.bos_token, tokenizer.pad_token, tokenizer.padding_side], default=str
    )
    return hashlib.sha256((rules + special).encode()).hexdigest()


def tokenized_sft_dataset(
    path: Path,
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_length: int,
    completion_only_loss: bool = True,
    max_samples: int | None = None,
    chat: ChatPrompts | None = None,
    moves: RowMoves | None = None,
) -> Dataset:
    """`_tokenize_sft` of the file's labelled rows, kept by content for this process: a warm trial (trainers.warm) tokenizes the
    workspace's file before its go, and the trial reuses it when its file, tokenizer and options are the same.
    Rows without an answer (prompts alone, for RL) are skipped: trained on, they would teach the model to stop at
    once."""
    try:
        content = hashlib.sha256(Path(path).read_bytes()).hexdigest()
    except OSError:  # missing or unreadable: read_jsonl says so, naming the file
        content = ""
    key = (
        content,
        tokenizer_fingerprint(tokenizer),
        str(max_length),
        str(completion_only_loss),
        str(max_samples),
        "plain" if chat is None else "chat",
        repr(moves),
    )
    if chat is None and content and key in _TOKENIZED:
        mark("data")
        return _TOKENIZED[key]
    dataset = _tokenize_sft(
        labelled_rows(read_jsonl(path, limit=max_samples, chat=chat, moves=moves), path),
        tokenizer,
        max_length=max_length,
        completion_only_loss=completion_only_loss,
        end_of_turn=chat.end_of_turn if chat is not None else "",
        path=path,
    )
    if chat is None and content:
        _TOKENIZED[key] = dataset
    return dataset


def _tokenize_sft(
    rows: list[dict[str, Any]],
    tokenizer: PreTrainedTokenizerBase,
    *,
    max_length: int,
    completion_only_loss: bool,
    end_of_turn: str,
    path: Path,
) -> Dataset:
    """For SFT, tokenized here in two batched calls: `input_ids` and `labels` (-100 outside the loss), the rows TRL's
    SFTTrainer would build from `prompt_completion_dataset` (EOS appended, the completion starting where prompt and
    prompt+completion tokens part, truncated from the end to `max_length`, rows with nothing left in the loss
    dropped). TRL does the same one row at a time through `datasets.map`: 3-7 s of every short trial's start-up on a
    12,000-row file, against well under one here. Pass it with `dataset_kwargs={"skip_prepare_dataset": True}`.
    `rows` have an answer (`labelled_rows` of `path`); each completion ends with `end_of_turn` (a chat template's)."""
    eos = tokenizer.eos_token or ""
    prompts = [r["prompt"] for r in rows]
    completions = [r["answer"] + end_of_turn for r in rows]
    completions = [c if c.endswith(eos) else c + eos for c in completions]
    prompt_ids = tokenizer(prompts)["input_ids"]
    full_ids = tokenizer([p + c for p, c in zip(prompts, completions, strict=True)])["input_ids"]
    input_ids: list[list[int]] = []
    labels: list[list[int]] = []
    for prompt, full in zip(prompt_ids, full_ids, strict=True):
        masked = _common_prefix_length(prompt, full) if completion_only_loss else 0
        row_labels = ([-100] * masked + list(full[masked:]))[:max_length]
        if all(label == -100 for label in row_labels):
            continue  # truncation left nothing to learn from this row
        input_ids.append(list(full[:max_length]))
        labels.append(row_labels)
    if not input_ids:
        raise DataFileError(
            f"{path}: every sample's answer falls beyond max_length={max_length} tokens; raise max_length"
        )
    from datasets import Dataset

    dataset = Dataset.from_dict({"input_ids": input_ids, "labels": labels})
    mark("data")
    return dataset


def _common_prefix_length(ids: list[int], other: list[int]) -> int:
    """Leading tokens two sequences share: where the completion starts (as TRL's `common_prefix_length`)."""
    length = 0
    for a, b in zip(ids, other, strict=False):
        if a != b:
            break
        length += 1
    return length


def prompt_answer_dataset(
    path: Path,
    *,
    max_samples: int | None = None,
    chat: ChatPrompts | None = None,
    moves: RowMoves | None = None,
) -> Dataset:
    """For RL: `prompt` plus the reference `answer`, which TRL passes to reward functions as a keyword."""
    rows = read_jsonl(path, limit=max_samples, chat=chat, moves=moves)
    from datasets import Dataset

    dataset = Dataset.from_dict(
        {
            "prompt": [r["prompt"] for r in rows],
            "answer": [r["answer"] for r in rows],
            "id": [r["id"] for r in rows],
        }
    )
    mark("data")
    return dataset
