"""The on-disk layout of RLLOOP_HOME and of one run; the only place that knows where files go."""

from __future__ import annotations

import hashlib
import json
import os
import secrets
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from grader.benchmarks import Benchmark
from tasks.atomic import atomic_write_text
from tasks.base import SourceRecords, Split, TrialFiles


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
    """Where one run's files live.

    The workspace (description, data) is what every trial reads, read-only. A trial writes only its own
    `trials/<id>/output`; the rest of `trials/<id>/` is the host's record of it (config, proposal, log, validation,
    outcome, tool calls), which no trial can write. An external agent writes only `agent/`."""

    home: Path
    run_id: str

    @property
    def run_dir(self) -> Path:
        return self.home / "runs" / self.run_id

    @property
    def labels(self) -> dict[str, str]:
        """What marks this run's trials (processes, containers) so that it can find and end them, and only them: its
        id and its home (the same run id under another home, another user's or another test's, is another run)."""
        home = hashlib.sha256(str(self.home.resolve()).encode()).hexdigest()[:16]
        return {"rlloop.run": self.run_id, "rlloop.home": home}

    @property
    def workspace(self) -> Path:
        return self.run_dir / "workspace"

    @property
    def data_dir(self) -> Path:
        return self.workspace / "data"

    @property
    def trials_dir(self) -> Path:
        """The host's records of every trial, outside the workspace: no trial can write here but its own output."""
        return self.run_dir / "trials"

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

    @property
    def agent_dir(self) -> Path:
        """An external agent's one writable folder, its `/workspace` (AutoRL-Bench's code/, output/ and scratch);
        the data, instructions and base model are mounted into it read-only. Its submissions are read from here."""
        return self.run_dir / "agent"

    @property
    def agent_meta_dir(self) -> Path:
        """The host's files for an external agent (run_meta.json), mounted read-only: the host writes only here."""
        return self.run_dir / "agent-meta"

    @property
    def run_meta_json(self) -> Path:
        """AutoRL-Bench's time signals for an external agent (start_time, timeout_s, last_submit_time, end_time)."""
        return self.agent_meta_dir / "run_meta.json"

    @property
    def agent_llm_transcript(self) -> Path:
        """Every model call an external agent made through the gateway, one JSON line each; the host's file,
        outside the agent's folder."""
        return self.run_dir / "agent-llm.jsonl"

    def trial_dir(self, trial_id: str) -> Path:
        """The host's record of one trial (never writable by a trial)."""
        return self.trials_dir / trial_id

    def trial_output(self, trial_id: str) -> Path:
        """The one folder trial `trial_id` may write: its checkpoint, metrics and scratch."""
        return self.trial_dir(trial_id) / "output"

    def checkpoint(self, relative: str) -> Path:
        """A TrialRecord's `checkpoint` (relative to the run folder, e.g. trials/t01/output) as a host path."""
        return self.run_dir / relative


Layout = Literal["rlloop", "autorl-bench"]
NORMALISED_FIELDS = {"id", "prompt", "answer"}
PUBLIC_SPLITS: tuple[Split, ...] = ("train", "valid")
OWN_DIR = "dataset"  # rlloop layout: the dataset's own records, in workspace/dataset/ (data/ keeps train+valid only)
NORMALISED_SUBDIR = "rlloop"  # AutoRL-Bench layout: rlloop's normalised records, beside the dataset's own


def source_records(benchmark: Benchmark, split: Split) -> list[dict[str, Any]]:
    """The dataset's own records of `split` (`tasks.base.SourceRecords`), else its normalised ones."""
    if isinstance(benchmark, SourceRecords):
        return benchmark.source_records(split)
    return [s.model_dump(include=NORMALISED_FIELDS) for s in benchmark.load(split)]


def data_files(paths: RunPaths, layout: Layout) -> dict[str, Path]:
    """Where each view of the data goes: {"own": folder, "normalised": folder}. Built-in trials read the normalised
    view at data/; an AutoRL-Bench agent reads the dataset's own records at data/ (`$DATA_PATH`), as it expects."""
    if layout == "autorl-bench":
        return {"own": paths.data_dir, "normalised": paths.data_dir / NORMALISED_SUBDIR}
    return {"own": paths.workspace / OWN_DIR, "normalised": paths.data_dir}


def _write_jsonl(target: Path, records: list[dict[str, Any]]) -> None:
    if not target.exists():
        atomic_write_text(target, "".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))


def prepare_workspace(paths: RunPaths, benchmark: Benchmark, layout: Layout = "rlloop") -> None:
    """Lay out the agent-visible workspace: task description, train and validation data in both views (the
    dataset's own records and rlloop's normalised `{"id", "prompt", "answer"}`), trials folder; the
    "autorl-bench" layout adds AutoRL-Bench's code/ folder and instructions.md.

    Idempotent (resume calls it again) and never writes the hidden test split.
    """
    paths.trials_dir.mkdir(parents=True, exist_ok=True)
    paths.grader_dir.mkdir(parents=True, exist_ok=True)
    paths.grader_dir.chmod(0o700)
    folders = data_files(paths, layout)
    for split in PUBLIC_SPLITS:
        own, normalised = folders["own"] / f"{split}.jsonl", folders["normalised"] / f"{split}.jsonl"
        if not own.exists():
            _write_jsonl(own, source_records(benchmark, split))
        if not normalised.exists():
            _write_jsonl(normalised, [s.model_dump(include=NORMALISED_FIELDS) for s in benchmark.load(split)])
    if isinstance(benchmark, TrialFiles):  # what the benchmark's scorer reads in a trial (public data only)
        for name, text in benchmark.trial_files().items():
            if not (paths.data_dir / name).exists():
                atomic_write_text(paths.data_dir / name, text)
    own_rel = folders["own"].relative_to(paths.workspace)
    norm_rel = folders["normalised"].relative_to(paths.workspace)
    example = source_records(benchmark, "train")[:1]
    fields = ", ".join(f"`{k}`" for k in (example[0] if example else {}))
    description = paths.workspace / "description.md"
    if not description.exists():
        atomic_write_text(
            description,
            f"# Task: {benchmark.name}\n\n{benchmark.description}\n\n"
            f"Data (train on `train.jsonl`, validate on `valid.jsonl`; the test set is hidden and scored only by "
            f"the grading server):\n\n"
            f"- `{own_rel}/`: the dataset's own records, one JSON object a line with {fields}\n"
            f'- `{norm_rel}/`: rlloop\'s normalised records, `{{"id", "prompt", "answer"}}` (`answer`: the '
            "reference the scorer compares against)\n",
        )
    if layout == "autorl-bench":
        instructions = paths.workspace / "instructions.md"
        if not instructions.exists():
            atomic_write_text(instructions, AUTORL_INSTRUCTIONS)


AUTORL_INSTRUCTIONS = """# Instructions

Train the base model to score higher on the hidden test set, within the time budget.

- Environment: TASK, BASE_MODEL, WORKSPACE (this folder, the working directory), MODEL_PATH (the base model,
  read-only), DATA_PATH (`./data`: `train.jsonl`, `valid.jsonl`), OUTPUT_DIR (`./output`: save models here, e.g.
  `./output/v1`), GRADING_SERVER_URL.
- Time: `./run_meta.json` (`start_time`, `timeout_s`, `last_submit_time`, `end_time`, unix seconds), or
  `GET $GRADING_SERVER_URL/time` (the same fields plus `now` and `remaining`).
- Submit: `POST $GRADING_SERVER_URL/submit` with `{"model_path": "<folder under ./output>"}` (absolute, or relative
  to this folder); the answer holds `submission_id`, `score` (0-1), `baseline_score`, `improvement`, `best`,
  `total_submissions`. Submit full models (merge LoRA adapters first), saved with `save_pretrained`.
- Write code under `./code`. Only the grading server is reachable; there is no other network.
"""
