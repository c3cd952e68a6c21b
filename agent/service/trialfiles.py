"""What the pages read of a trial's folder, and only through `sandbox.untrusted`: a trial is hostile.

Every read is walked from the run folder one component at a time without following links (so neither a link the
trial left in its output nor a swapped `trials/<id>` leads elsewhere), refuses FIFOs and devices, and is capped. A
file that cannot be read this way is reported as a note, never followed. The page shows the text with textContent.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path
from typing import Any, cast

from agent.service.page_schemas import FailureCluster, MetricSeries
from sandbox import untrusted

LOG_TAIL_BYTES = 16 * 1024
CODE_BYTES = 256 * 1024
HISTORY_BYTES = 1024 * 1024
VALIDATION_BYTES = untrusted.MAX_TEXT_BYTES
TOOLS_BYTES = 256 * 1024
MAX_POINTS = 400  # per metric series: enough for a small plot
PLOTTED = ("loss", "train_loss", "reward", "rewards/mean", "eval_loss", "learning_rate")
_NUMBER = re.compile(r"^-?\d+(\.\d+)?$")


class TrialFiles:
    """The files of one trial under `run_dir`, read safely; `notes` says what could not be read and why."""

    def __init__(self, run_dir: Path, trial_id: str) -> None:
        self.run_dir = run_dir
        self.trial_id = trial_id
        self.notes: list[str] = []

    def _rel(self, *parts: str) -> str:
        return "/".join(("trials", self.trial_id, *parts))

    def _read(self, read: Callable[..., Any], parts: tuple[str, ...], max_bytes: int, absent: Any) -> Any:
        """`read` one of the trial's files through `untrusted`: `absent` when it is missing, and also, with a note,
        when it is refused or over the cap."""
        try:
            return read(self.run_dir, self._rel(*parts), max_bytes=max_bytes)
        except FileNotFoundError:
            return absent
        except (OSError, ValueError) as exc:
            self.notes.append(f"{'/'.join(parts)}: {exc}")
            return absent

    def text(self, *parts: str, max_bytes: int = CODE_BYTES) -> str | None:
        """A whole file (None when absent; a note when refused or over the cap)."""
        return cast(str | None, self._read(untrusted.read_text, parts, max_bytes, None))

    def tail(self, *parts: str, max_bytes: int = LOG_TAIL_BYTES) -> str:
        return cast(str, self._read(untrusted.tail_text, parts, max_bytes, ""))

    def json(self, *parts: str, max_bytes: int = VALIDATION_BYTES) -> Any:
        return self._read(untrusted.read_json, parts, max_bytes, None)

    def log_tail(self) -> tuple[str, bool]:
        """(the end of log.txt, whether earlier lines were left out): at most LOG_TAIL_BYTES, from a whole line."""
        text = self.tail("log.txt", max_bytes=LOG_TAIL_BYTES + 1)
        if len(text.encode("utf-8", errors="replace")) <= LOG_TAIL_BYTES:
            return text, False
        return text.partition("\n")[2], True

    def train_py(self) -> str | None:
        return self.text("train.py")

    def metric_series(self) -> list[MetricSeries]:
        """Loss, reward and learning rate over steps, from the trainer's output/log_history.jsonl (trial-written)."""
        raw = self.text("output", "log_history.jsonl", max_bytes=HISTORY_BYTES)
        if not raw:
            return []
        series: dict[str, MetricSeries] = {}
        for line in raw.splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if not isinstance(row, dict):
                continue
            step = row.get("step")
            if not isinstance(step, int | float) or isinstance(step, bool):
                continue
            for name in PLOTTED:
                value = row.get(name)
                if isinstance(value, int | float) and not isinstance(value, bool) and value == value:
                    found = series.setdefault(name, MetricSeries(name=name))
                    if len(found.steps) < MAX_POINTS:
                        found.steps.append(float(step))
                        found.values.append(float(value))
        return [series[name] for name in PLOTTED if name in series]

    def failures(self, examples: int = 3) -> tuple[list[FailureCluster], int | None]:
        """Wrong answers on the valid split (validation.json), grouped by kind, with a few examples each."""
        data = self.json("validation.json")
        if not isinstance(data, dict) or not isinstance(data.get("samples"), list):
            return [], None
        clusters: dict[str, FailureCluster] = {}
        for sample in data["samples"]:
            if not isinstance(sample, dict) or sample.get("correct"):
                continue
            kind = failure_kind(str(sample.get("expected", "")), str(sample.get("got", "")))
            cluster = clusters.setdefault(kind, FailureCluster(kind=kind, count=0))
            cluster.count += 1
            if len(cluster.examples) < examples:
                cluster.examples.append(
                    {key: str(sample.get(key, ""))[:300] for key in ("id", "prompt", "expected", "got")}
                )
        n = data.get("n")
        return sorted(clusters.values(), key=lambda c: -c.count), n if isinstance(n, int) else None

    def tool_calls(self) -> list[dict[str, Any]]:
        """The tools the LLM proposer called before proposing this trial (proposal_tools.jsonl)."""
        raw = self.text("proposal_tools.jsonl", max_bytes=TOOLS_BYTES)
        calls: list[dict[str, Any]] = []
        for line in (raw or "").splitlines():
            try:
                row = json.loads(line)
            except ValueError:
                continue
            if isinstance(row, dict):
                calls.append({str(k): _short(v) for k, v in row.items()})
        return calls


def failure_kind(expected: str, got: str) -> str:
    """How an answer was wrong, in words a reviewer groups by."""
    got = got.strip()
    if not got:
        return "no answer"
    if _NUMBER.match(expected.strip()):
        return "wrong number" if _NUMBER.match(got) else "not a number"
    return "wrong answer"


def _short(value: Any, limit: int = 2000) -> Any:
    if isinstance(value, str):
        return value if len(value) <= limit else value[: limit - 3] + "..."
    if isinstance(value, int | float | bool) or value is None:
        return value
    text = json.dumps(value, default=str)
    return text if len(text) <= limit else text[: limit - 3] + "..."
