"""Detect cheating at each submission rather than only prevent it: hidden test items in what the trial wrote, and
weights that are (almost) the base model or an earlier submission.

- Contamination: the trial folder of a submission (data, logs, code, config; weight files skipped, each text file
  read only up to a byte limit) is scanned for the hidden test items. Items of 13 or more word tokens are matched
  by 13-gram overlap, as large-model decontamination does; n-grams that several test items share (a prompt
  template) are left out, and an item counts as found when at least half of its own n-grams are present. Shorter
  items (`37+58=` -> `95`) count as found when their whole text appears, prompt immediately or after whitespace
  followed by its answer, as a run of whole tokens (so `84-66=18` is not found inside `184-66=185`). JSON lines
  are also read as their string values, so `{"prompt": "37+58=", "answer": "95"}` is found too.
- Copies: the relative L2 distance ||w - w_base|| / ||w_base|| of the tensor that moved most, over the tensors the
  two share, the base streamed tensor by tensor from its safetensors files, so base + tiny noise is caught where an
  exact hash is not. Per tensor, not one norm over all weights: a fine-tune of a pretrained model at its rate leaves
  most weights where they were (a 134.5M SmolLM2 after 27 SFT steps at 5e-5, 0.000 -> 0.400: 0.00099 over all
  weights, but 0.0059 in its most-moved tensor), while noise or a cast moves every tensor alike (the same base cast
  to fp16 and back: 0.00021 at most).
- Near-duplicates: a fixed, seeded sample of every tensor's values (a sketch, stored per submission) compared with
  the sketches of earlier submissions by the same measure, tensor by tensor.

Evidence names files and figures, and quotes only text found in the trial's own files.
"""

from __future__ import annotations

import json
import math
import os
import re
import stat
import zlib
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from functools import partial
from pathlib import Path
from typing import Any, Literal

import torch
from pydantic import BaseModel

from grader.benchmarks import MultiTurnBenchmark, Sample
from grader.config import IntegrityConfig
from sandbox import untrusted

Check = Literal["contamination", "base_copy", "near_duplicate", "chat_template"]

WEIGHT_SUFFIXES = {
    ".safetensors",
    ".bin",
    ".pt",
    ".pth",
    ".ckpt",
    ".gguf",
    ".npy",
    ".npz",
    ".onnx",
    ".h5",
    ".msgpack",
    ".pkl",
    ".arrow",
    ".parquet",
}
_WORD = re.compile(
    r"[^\W_]+"
)  # long items: alphanumeric runs, lowercased (punctuation and JSON quotes ignored)
_FINE = re.compile(r"\w+|[^\w\s]")  # short items: words and single punctuation marks (`37`, `+`, `58`, `=`)
_MIN_SHORT_TOKENS = 3  # a short item with fewer fine tokens (`yes`) would be found anywhere: not scanned
_SNIPPET_CHARS = 80
_SKETCH_PER_TENSOR = 1024
_QUOTED = 5


class Flag(BaseModel):
    """One reason a submission is suspect; `evidence` is the sentence people read, the rest are its figures."""

    check: Check
    evidence: str
    value: float | None = None  # fraction of test items found, or the relative distance
    found: int | None = None
    total: int | None = None
    of_submission: int | None = None


# --- the test-item index ------------------------------------------------------------------------------------------
@dataclass
class TestItemIndex:
    """Built once per grader process from the hidden test items it evaluates."""

    __test__ = False  # not a pytest test class, whatever its name

    total: int
    ngram: int
    ngram_owner: dict[tuple[str, ...], int] = field(default_factory=dict)  # distinctive n-gram -> item index
    ngram_need: dict[int, int] = field(default_factory=dict)  # item index -> n-grams that must be present
    ngram_first: set[str] = field(default_factory=set)
    short_by_prefix: dict[tuple[str, ...], list[tuple[int, tuple[str, ...]]]] = field(default_factory=dict)
    short_first: set[str] = field(default_factory=set)
    scannable: int = 0

    @classmethod
    def build(cls, samples: list[Sample], ngram: int = 13) -> TestItemIndex:
        index = cls(total=len(samples), ngram=ngram)
        owners: dict[tuple[str, ...], set[int]] = defaultdict(set)
        item_grams: dict[int, set[tuple[str, ...]]] = {}
        for i, sample in enumerate(samples):
            text = f"{sample.prompt} {sample.answer}"
            words = _WORD.findall(text.lower())
            if len(words) >= ngram:
                grams = {tuple(words[j : j + ngram]) for j in range(len(words) - ngram + 1)}
                item_grams[i] = grams
                for gram in grams:
                    owners[gram].add(i)
                continue
            fine = tuple(_FINE.findall(text.lower()))
            if len(fine) < _MIN_SHORT_TOKENS or not sample.answer.strip():
                continue
            prefix = fine[:_MIN_SHORT_TOKENS]
            index.short_by_prefix.setdefault(prefix, []).append((i, fine))
            index.short_first.add(fine[0])
            index.scannable += 1
        for i, grams in item_grams.items():
            own = [g for g in grams if len(owners[g]) == 1]  # template n-grams shared by items tell nothing
            if not own:
                continue
            for gram in own:
                index.ngram_owner[gram] = i
                index.ngram_first.add(gram[0])
            index.ngram_need[i] = max(1, math.ceil(len(own) / 2))
            index.scannable += 1
        return index

    @classmethod
    def for_benchmark(cls, benchmark: object, samples: list[Sample], ngram: int = 13) -> TestItemIndex | None:
        """The index, or None for multi-turn games: their test items are boards that training turns may show
        without leaking anything (the grader plays the game), so finding one in a trial's data proves nothing."""
        if isinstance(benchmark, MultiTurnBenchmark):
            return None
        return cls.build(samples, ngram)

    def threshold(self, config: IntegrityConfig) -> int:
        """Items that must be found before a folder is flagged."""
        return max(config.min_items, math.ceil(config.min_fraction * self.total))


@dataclass
class ScanResult:
    """What a scan found: item index -> (file, quoted text) of its first sighting, and the reading it took."""

    found: dict[int, tuple[str, str]] = field(default_factory=dict)
    per_file: dict[str, int] = field(default_factory=dict)
    files_read: int = 0
    bytes_read: int = 0
    ngram_hits: dict[int, set[tuple[str, ...]]] = field(default_factory=lambda: defaultdict(set))

    def add(self, item: int, where: str, quote: Callable[[], str]) -> None:
        """Record a found item; only the first few are quoted (quoting re-reads the text up to the match)."""
        self.found[item] = (where, quote() if len(self.found) < _QUOTED else "")
        self.per_file[where] = self.per_file.get(where, 0) + 1


def _json_strings(value: Any) -> Iterator[str]:
    """String leaves of parsed JSON, chat roles left out (`{"role": "user", "content": ...}` reads as content)."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for key, item in value.items():
            if key != "role":
                yield from _json_strings(item)
    elif isinstance(value, list):
        for item in value:
            yield from _json_strings(item)


def readable_views(text: str) -> Iterator[str]:
    """The text itself, then its JSON lines (or the whole text as JSON) read as their string values."""
    yield text
    stripped = text.lstrip()
    if stripped[:1] not in ("{", "["):
        return
    try:
        yield "\n".join(_json_strings(json.loads(text)))
        return
    except ValueError:
        pass
    parts: list[str] = []
    for line in text.splitlines():
        line = line.strip()
        if line[:1] in ("{", "["):
            try:
                parts.append(" ".join(_json_strings(json.loads(line))))
            except ValueError:
                continue
    if parts:
        yield "\n".join(parts)


def _snippet(text: str, pattern: re.Pattern[str], start_token: int, length: int) -> str:
    """The characters of tokens [start_token, start_token + length) of `text` as `pattern` splits it."""
    begin = end = 0
    for k, match in enumerate(pattern.finditer(text.lower())):
        if k == start_token:
            begin = match.start()
        if k == start_token + length - 1:
            end = match.end()
            break
    quoted = " ".join(text[begin:end].split())
    return quoted if len(quoted) <= _SNIPPET_CHARS else quoted[: _SNIPPET_CHARS - 3] + "..."


def scan_text(index: TestItemIndex, text: str, where: str, result: ScanResult) -> None:
    """Add to `result` the test items found in `text` (one file's content, already bounded)."""
    for view in readable_views(text):
        lowered = view.lower()
        if index.short_by_prefix:
            fine = _FINE.findall(lowered)
            first, prefixes = index.short_first, index.short_by_prefix
            for i, token in enumerate(fine):
                if token not in first:
                    continue
                candidates = prefixes.get(tuple(fine[i : i + _MIN_SHORT_TOKENS]))
                if not candidates:
                    continue
                for item, tokens in candidates:
                    if item not in result.found and tuple(fine[i : i + len(tokens)]) == tokens:
                        result.add(item, where, partial(_snippet, view, _FINE, i, len(tokens)))
        if index.ngram_owner:
            words = _WORD.findall(lowered)
            n, owner, first_words = index.ngram, index.ngram_owner, index.ngram_first
            for i in range(len(words) - n + 1):
                if words[i] not in first_words:
                    continue
                gram = tuple(words[i : i + n])
                owned = owner.get(gram)
                if owned is None or owned in result.found:
                    continue
                hits = result.ngram_hits[owned]
                hits.add(gram)
                if len(hits) >= index.ngram_need[owned]:
                    result.add(owned, where, partial(_snippet, view, _WORD, i, n))


def _is_binary(head: bytes) -> bool:
    return b"\x00" in head[:8192]


def _files(folder: Path, limit: int) -> Iterator[str]:
    """Regular files under `folder` (relative paths), weight files skipped, sorted for stable evidence; walked
    with no link followed at any depth (links, FIFOs and devices a trial planted are passed over, never opened)."""
    count = 0
    stack = [""]
    while stack:
        rel = stack.pop()
        try:
            with untrusted.open_dir(folder, rel) as fd:
                entries = sorted(
                    (n, os.stat(n, dir_fd=fd, follow_symlinks=False).st_mode) for n in os.listdir(fd)
                )
        except OSError:
            continue
        subdirs = []
        for entry, mode in entries:
            name = f"{rel}/{entry}" if rel else entry
            if stat.S_ISDIR(mode):
                subdirs.append(name)
            elif stat.S_ISREG(mode) and Path(entry).suffix.lower() not in WEIGHT_SUFFIXES:
                count += 1
                if count > limit:
                    return
                yield name
        stack.extend(reversed(subdirs))


def scan_folder(index: TestItemIndex, folder: Path, label_root: Path, config: IntegrityConfig) -> ScanResult:
    """Scan what a trial wrote, reading at most `max_file_bytes` of each text file and `max_total_bytes` in all
    (every file opened through `sandbox.untrusted`: no link followed, nothing but regular files)."""
    result = ScanResult()
    if index.scannable == 0 or not untrusted.is_dir(folder):
        return result
    budget = config.max_total_bytes
    for rel in _files(folder, config.max_files):
        if budget <= 0:
            break
        try:
            with untrusted.open_file(folder, rel, max_bytes=None) as fd:
                raw = os.read(fd, min(config.max_file_bytes, budget))
        except OSError:
            continue
        if not raw or _is_binary(raw):
            continue
        budget -= len(raw)
        result.files_read += 1
        result.bytes_read += len(raw)
        try:
            where = str((folder / rel).relative_to(label_root))
        except ValueError:
            where = rel
        scan_text(index, raw.decode("utf-8", errors="replace"), where, result)
    return result


def contamination_flag(
    index: TestItemIndex, result: ScanResult, folder_label: str, config: IntegrityConfig
) -> Flag | None:
    """A flag when the scan found at least the threshold of test items, with the files and the first one quoted."""
    found = len(result.found)
    if found < index.threshold(config):
        return None
    files = sorted(result.per_file.items(), key=lambda kv: (-kv[1], kv[0]))
    where = files[0][0] if len(files) == 1 else ", ".join(f"{f}: {n}" for f, n in files[:3])
    if len(files) > 3:
        where += f", and {len(files) - 3} more files"
    first = next(iter(result.found.values()))[1]
    place = f"in {where}" if len(files) == 1 else f"in {folder_label} ({where})"
    return Flag(
        check="contamination",
        evidence=f"{found} of {index.total} hidden test items found {place} (first: {first!r})",
        value=found / index.total,
        found=found,
        total=index.total,
    )


def trial_folder(checkpoint: Path, allowed_roots: Iterable[Path]) -> tuple[Path, Path]:
    """(the trial's folder: the checkpoint's ancestor directly under its allowed root, the root's parent for labels).

    A checkpoint at `trials/t02/output` gives `trials/t02`; one directly in the root gives the checkpoint itself.
    """
    for root in allowed_roots:
        root = root.resolve()
        if checkpoint == root:
            return checkpoint, root.parent
        if root in checkpoint.parents:
            top = root / checkpoint.relative_to(root).parts[0]
            return top, root.parent
    return checkpoint, checkpoint.parent


# --- weights ----------------------------------------------------------------------------------------------------
def relative_distance_to_files(state: dict[str, torch.Tensor], weight_files: Iterable[Path]) -> float | None:
    """The largest ||w - w_ref|| / ||w_ref|| of a tensor `state` shares (name and shape) with the safetensors files.

    The reference is read one tensor at a time, so memory stays at the loaded model plus one tensor. None when no
    tensor matches (a different architecture: not a copy).
    """
    from safetensors import safe_open

    moved = 0.0
    matched = 0
    for weight_file in weight_files:
        with safe_open(str(weight_file), framework="pt") as handle:  # type: ignore[no-untyped-call]
            for key in handle.keys():  # noqa: SIM118 - safe_open handles are not mappings
                mine = state.get(key)
                if mine is None:
                    continue
                ref = handle.get_tensor(key)
                if tuple(ref.shape) != tuple(mine.shape) or not ref.is_floating_point():
                    continue
                ref64 = ref.to(torch.float64)
                ref_norm = float(ref64.norm())
                matched += 1
                if ref_norm > 0.0:
                    diff = float((mine.detach().to("cpu", torch.float64) - ref64).norm())
                    moved = max(moved, diff / ref_norm)
    return moved if matched else None


def weights_sketch(state: dict[str, torch.Tensor]) -> tuple[str, bytes]:
    """(layout key, float32 bytes): the same seeded positions of every tensor, to compare submissions cheaply."""
    layout: list[str] = []
    parts: list[torch.Tensor] = []
    for name, tensor in _sketched(state):
        flat = tensor.detach().to("cpu").reshape(-1)
        generator = torch.Generator().manual_seed(zlib.crc32(name.encode()))
        picks = torch.randint(0, flat.numel(), (min(_SKETCH_PER_TENSOR, flat.numel()),), generator=generator)
        parts.append(flat[picks].to(torch.float32))
        layout.append(f"{name}|{tuple(tensor.shape)}")
    values = torch.cat(parts) if parts else torch.zeros(0)
    key = f"{zlib.crc32(chr(10).join(layout).encode()):08x}"
    return key, values.numpy().tobytes()


def _sketched(state: dict[str, torch.Tensor]) -> list[tuple[str, torch.Tensor]]:
    return [
        (name, state[name])
        for name in sorted(state)
        if state[name].is_floating_point() and state[name].numel() > 0
    ]


def sketch_sizes(state: dict[str, torch.Tensor]) -> list[int]:
    """How many values of each tensor a sketch of `state` holds, in its order."""
    return [min(_SKETCH_PER_TENSOR, tensor.numel()) for _, tensor in _sketched(state)]


def sketch_distance(mine: bytes, earlier: bytes, sizes: list[int] | None = None) -> float | None:
    """Relative L2 distance between two sketches of the same layout: of the tensor that moved most when `sizes`
    (`sketch_sizes`) splits them, else over all their values (None when they cannot be compared)."""
    if len(mine) != len(earlier) or not mine:
        return None
    a = torch.frombuffer(bytearray(mine), dtype=torch.float32).to(torch.float64)
    b = torch.frombuffer(bytearray(earlier), dtype=torch.float32).to(torch.float64)
    if sizes is None or sum(sizes) != a.numel():
        norm = float(b.norm())
        return None if norm == 0.0 else float((a - b).norm()) / norm
    moved, compared = 0.0, False
    for mine_part, earlier_part in zip(a.split(sizes), b.split(sizes), strict=True):
        norm = float(earlier_part.norm())
        if norm > 0.0:
            moved, compared = max(moved, float((mine_part - earlier_part).norm()) / norm), True
    return moved if compared else None


def copy_flag(distance: float | None, config: IntegrityConfig) -> Flag | None:
    if distance is None or distance >= config.copy_epsilon:
        return None
    return Flag(
        check="base_copy",
        evidence=f"relative L2 distance {distance:.2g} to the base model in its most-moved tensor (a copy below "
        f"{config.copy_epsilon:g})",
        value=distance,
    )


def near_duplicate_flag(distances: dict[int, float], config: IntegrityConfig) -> Flag | None:
    """The closest earlier submission within `near_duplicate_epsilon`, if any."""
    close = {sid: d for sid, d in distances.items() if d < config.near_duplicate_epsilon}
    if not close:
        return None
    sid = min(close, key=lambda s: (close[s], s))
    return Flag(
        check="near_duplicate",
        evidence=f"relative L2 distance {close[sid]:.2g} to submission #{sid} in its most-moved tensor (a "
        "near-duplicate resubmission)",
        value=close[sid],
        of_submission=sid,
    )


# --- all checks of one submission ---------------------------------------------------------------------------------
def integrity_flags(
    *,
    index: TestItemIndex | None,
    config: IntegrityConfig,
    checkpoint: Path,
    allowed_roots: Iterable[Path],
    state: dict[str, torch.Tensor],
    base_weight_files: Iterable[Path],
    earlier_sketches: Callable[[str], dict[int, bytes]],
) -> tuple[list[Flag], tuple[str, bytes]]:
    """(flags, weight sketch to store) for a loaded submission; an empty list means nothing was found."""
    flags: list[Flag] = []
    if index is not None:
        folder, label_root = trial_folder(checkpoint, allowed_roots)
        result = scan_folder(index, folder, label_root, config)
        try:
            label = str(folder.relative_to(label_root))
        except ValueError:
            label = folder.name
        found = contamination_flag(index, result, label, config)
        if found is not None:
            flags.append(found)
    copy = copy_flag(relative_distance_to_files(state, base_weight_files), config)
    if copy is not None:
        flags.append(copy)
    layout, sketch = weights_sketch(state)
    distances = {
        sid: d
        for sid, data in earlier_sketches(layout).items()
        if (d := sketch_distance(sketch, data, sketch_sizes(state))) is not None
    }
    near = near_duplicate_flag(distances, config)
    if near is not None:
        flags.append(near)
    return flags, (layout, sketch)


def flags_json(flags: list[Flag]) -> str:
    return json.dumps([f.model_dump(exclude_none=True) for f in flags])
