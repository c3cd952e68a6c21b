"""The on-disk layout of RLLOOP_HOME and of one run; the only place that knows where files go."""

from __future__ import annotations

import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path

from grader.benchmarks import Benchmark

# re-exported for the agent's many callers; `tasks.atomic` is the one writer
from tasks.atomic import atomic_write_json as atomic_write_json
from tasks.atomic import atomic_write_text as atomic_write_text


class HomeNotWritableError(RuntimeError):
    """RLLOOP_HOME cannot be created or written."""


def ensure_home(home: Path) -> Path:
    """Create RLLOOP_HOME and prove it is writable, with one actionable error otherwise."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        probe = home / f".write-test-{os.getpid()}"
        probe.write_text("ok")
        probe.unlink()
    except OSError as exc:
        raise HomeNotWritableError(
            f"RLLOOP_HOME {home} is not writable ({exc.strerror}); set RLLOOP_HOME or --home to a folder you can write"
        ) from None
    for sub in ("models", "runs"):
        (home / sub).mkdir(exist_ok=True)
    return home.resolve()


def new_run_id(benchmark: str) -> str:
    return f"{time.strftime('%Y%m%d-%H%M%S')}-{benchmark}-{secrets.token_hex(2)}"


@dataclass(frozen=True)
class RunPaths:
    """Where one run's files live. The workspace is all the agent and its sandbox may see."""

    home: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.home / "runs" / self.run_id

    @property
    def workspace(self) -> Path:
        return self.run_dir / "workspace"

    @property
    def data_dir(self) -> Path:
        return self.workspace / "data"

    @property
    def trials_dir(self) -> Path:
        return self.workspace / "trials"

    @property
    def grader_dir(self) -> Path:
        """Private to the grader: hidden test data and its score store. Never mounted into a sandbox."""
        return self.run_dir / "grader"

    @property
    def scores_json(self) -> Path:
        return self.run_dir / "scores.json"

    @property
    def checkpoints_db(self) -> Path:
        return self.run_dir / "checkpoints.db"

    @property
    def run_json(self) -> Path:
        return self.run_dir / "run.json"

    @property
    def summary_json(self) -> Path:
        """How the run ended: its results row, status, stop reason and the grader's final numbers."""
        return self.run_dir / "summary.json"

    @property
    def log_file(self) -> Path:
        return self.run_dir / "run.log"

    @property
    def budget_ledger(self) -> Path:
        """LLM tokens, dollars and compute spent so far; a resumed run goes on from them."""
        return self.run_dir / "budget.json"

    @property
    def plot_png(self) -> Path:
        return self.run_dir / "score_over_submissions.png"

    def trial_dir(self, trial_id: str) -> Path:
        return self.trials_dir / trial_id


def prepare_workspace(paths: RunPaths, benchmark: Benchmark) -> None:
    """Lay out the agent-visible workspace: task description, train and validation data, trials folder.

    Idempotent (resume calls it again) and never writes the hidden test split.
    """
    paths.trials_dir.mkdir(parents=True, exist_ok=True)
    paths.grader_dir.mkdir(parents=True, exist_ok=True)
    paths.grader_dir.chmod(0o700)
    for split in ("train", "valid"):
        target = paths.data_dir / f"{split}.jsonl"
        if target.exists():
            continue
        lines = [s.model_dump_json(include={"id", "prompt", "answer"}) for s in benchmark.load(split)]
        atomic_write_text(target, "\n".join(lines) + "\n")
    description = paths.workspace / "description.md"
    if not description.exists():
        atomic_write_text(
            description,
            f"# Task: {benchmark.name}\n\n{benchmark.description}\n\n"
            "Data: `data/train.jsonl` (train on it) and `data/valid.jsonl` (validate on it); each line holds "
            '`{"id", "prompt", "answer"}`. The test set is hidden and scored only by the grading server.\n',
        )
