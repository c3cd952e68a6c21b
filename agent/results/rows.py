"""results.csv: one row per run, built-in loop and external agent alike, appended under a lock by every process.

`ResultRow` is the row; its fields are the file's columns, in order, so the two can never drift apart. Scores are
written with four decimals and a missing value as an empty cell, in the file and in the run's summary.json alike.
`baseline`, `best_score` and `improvement` are the run's reported figures, on the half of the hidden test set that
`scored_on` names (the private half when the test set is split); `public_baseline` and `public_best` are the same run
on the public half, the one it chose by and every live table shows.
`result_row` is the one way a run's row is built (the research loop's finish, an external agent's, and a run that
ended early), and `final_figures` the one reader of a run's numbers: the figures the grader's finalize reports
(`grader.figures`, the score rule), never recomputed here.
"""

from __future__ import annotations

import csv
import fcntl
import os
import time
from collections.abc import Mapping
from pathlib import Path
from typing import IO, TYPE_CHECKING, Any

from pydantic import BaseModel, Field, field_serializer

from agent.llm import BudgetSpent
from grader.figures import RunFigures, run_figures
from tasks.atomic import atomic_write

if TYPE_CHECKING:
    from agent.run import RunConfig, RunPaths


def _now() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%S")


class ResultRow(BaseModel):
    """One run's line in results.csv (built by `result_row`). The score columns are `final_figures`: the numbers
    the grader's finalize reports, by the one score rule in `grader.figures`."""

    run_id: str
    timestamp: str = Field(default_factory=_now)
    task: str
    agent: str
    driver_model: str = ""
    base_model: str
    baseline: float | None = None
    best_score: float | None = None
    improvement: float | None = None
    scored_on: str = (
        ""  # the half baseline, best_score and improvement are on: "private", or "public" (no split)
    )
    public_baseline: float | None = None  # the base model on the public half (what the run chose by)
    public_best: float | None = None  # the best submission on the public half
    submissions: int = 0
    duration_s: float | None = None
    success: bool
    workspace: str
    isolation: str | None = (
        None  # "container", "namespaces", or "none": how the run's trials were kept from the grader
    )
    llm_calls: int = (
        0  # model calls the run paid for: the driver LLM's, or an external agent's through the gateway
    )
    llm_tokens: int = 0  # their tokens, in + out
    llm_cost_usd: float = 0.0  # their cost (agent.llm.pricing)
    llm_limit: str = ""  # the cap that refused an external agent's model calls, if one did
    error: str = ""  # why the run did not succeed, in one line (an external agent's error); empty on success
    # trial wall seconds (preparing, start-up, training, saving, validating): what --max-compute-s counts
    compute_s: float | None = None
    train_s: float | None = None  # of which training, as the trainers reported it

    @field_serializer("baseline", "best_score", "improvement", "public_baseline", "public_best")
    def _four_decimals(self, value: float | None) -> str:
        return "" if value is None else f"{value:.4f}"


RESULTS_COLUMNS: list[str] = list(ResultRow.model_fields)


def agent_label(config: RunConfig, external: str | None = None) -> str:
    """The `agent` column: an external agent's own name; the research loop's `agent_name` with the built-in
    proposer, else `rlloop-<proposer>` (so runs of different proposers are never pooled under one name)."""
    if external is not None:
        return external
    proposer = config.proposer_name
    return config.agent_name if proposer == "builtin" else f"rlloop-{proposer}"


def result_row(
    config: RunConfig,
    paths: RunPaths,
    *,
    success: bool,
    figures: Mapping[str, Any] | None = None,
    external: str | None = None,
    duration_s: float | None = None,
    isolation: str | None = None,
    error: str = "",
    llm_limit: str = "",
    compute: tuple[float, float] | None = None,
) -> ResultRow:
    """A run's results row, however it ended. `figures` are `final_figures`' columns (none: the run ended before
    it had any); `external` names an external agent (no driver model of ours); `error` is kept only on failure.
    The LLM columns are the run's budget ledger: what its driver LLM, or its external agent's gateway, spent;
    `compute` is (trial wall seconds, of which training) over the run's trials."""
    spent = _llm_spent(paths.budget_ledger)
    return ResultRow(
        run_id=paths.run_id,
        task=config.benchmark,
        agent=agent_label(config, external),
        driver_model="" if external is not None else (config.driver_model or ""),
        base_model=config.base_model,
        **(figures or {}),
        duration_s=duration_s,
        compute_s=None if compute is None else round(compute[0], 1),
        train_s=None if compute is None else round(compute[1], 1),
        success=success,
        workspace=str(paths.workspace),
        isolation=isolation,
        error="" if success else error,
        llm_calls=spent.llm_calls,
        llm_tokens=spent.tokens,
        llm_cost_usd=round(spent.usd, 6),
        llm_limit=llm_limit,
    )


def _llm_spent(ledger: Path) -> BudgetSpent:
    """The ledger's totals; none spent when the run has no ledger (no LLM) or it cannot be read."""
    try:
        return BudgetSpent.model_validate_json(ledger.read_text())
    except (OSError, ValueError):
        return BudgetSpent()


def final_figures(
    final: Mapping[str, Any],
    *,
    baseline: float | None = None,
    best: float | None = None,
    submissions: int = 0,
) -> dict[str, Any]:
    """The row's score columns from the grader's finalize answer: its `reported` figures, and the half they are on
    (`scored_on`), with the public pair beside them. Where the grader gave none (it could not be read, or an
    interrupted run keeps it open), the run's own public `baseline` and `best` under the same rule; `submissions` is
    the run's own count, used where the grader gave none."""
    figures: RunFigures | None = None
    if final.get("reported"):
        figures = RunFigures.model_validate(final["reported"])
    elif baseline is not None:
        figures = run_figures(float(baseline), None if best is None else float(best))
    count = final.get("total_submissions")
    public_baseline = _number(final.get("baseline_score")) if final.get("reported") else baseline
    public_best = _number(final.get("best_score")) if final.get("reported") else best
    if public_best is None and figures is not None and public_baseline is not None:
        public_best = (
            public_baseline  # the score rule: no scored submission, the run's model is its base model
        )
    return {
        "baseline": figures.baseline if figures else None,
        "best_score": figures.best if figures else best,
        "improvement": figures.improvement if figures else None,
        "scored_on": figures.scored_on if figures else "",
        "public_baseline": public_baseline,
        "public_best": public_best,
        "submissions": int(count if count is not None else submissions or 0),
    }


def summary_figures(summary: Mapping[str, Any]) -> dict[str, Any]:
    """A finished run's figures from its summary.json: the grader's reported ones, else its results row's (a
    summary from before `scored_on` existed holds the public pair there only when it had no grader figures)."""
    return final_figures(
        summary.get("grader") or {},
        baseline=_number(summary.get("public_baseline", summary.get("baseline"))),
        best=_number(summary.get("public_best", summary.get("best_score"))),
        submissions=int(_number(summary.get("submissions")) or 0),
    )


def _number(value: Any) -> float | None:
    """A score as summary.json holds it (a float, or the row's four-decimal text; empty: none)."""
    try:
        return None if value in (None, "") else float(value)
    except (TypeError, ValueError):
        return None


def append_result_row(results_csv: Path, row: ResultRow | Mapping[str, Any]) -> None:
    """Append one row under an exclusive lock, writing the header for a new file; never loses another run's rows.
    A run has one row: one interrupted and then resumed wrote a row when it stopped, and the row of its real end
    replaces that one (the file rewritten whole, atomically). A file from before a column was added gets the new
    header first (its rows, with that column empty, written to a new file that replaces it whole), so every row
    lines up with the header."""
    values = row.model_dump() if isinstance(row, ResultRow) else row
    results_csv.parent.mkdir(parents=True, exist_ok=True)
    while True:
        with open(results_csv, "a+", newline="") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                if not _same_file(handle, results_csv):
                    continue  # another writer replaced the file while this one waited: lock the new one
                handle.seek(0)
                header = next(csv.reader(handle), None)
                if header is not None and header != RESULTS_COLUMNS:
                    _upgrade_header(handle, results_csv)
                    continue
                if header is not None and _replace_row(handle, results_csv, values):
                    return
                handle.seek(0, 2)
                writer = csv.DictWriter(handle, fieldnames=RESULTS_COLUMNS, extrasaction="ignore")
                if handle.tell() == 0:
                    writer.writeheader()
                writer.writerow({k: ("" if values.get(k) is None else values[k]) for k in RESULTS_COLUMNS})
                handle.flush()
                return
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)


def _same_file(handle: IO[str], path: Path) -> bool:
    try:
        return os.fstat(handle.fileno()).st_ino == os.stat(path).st_ino
    except FileNotFoundError:
        return False


def _replace_row(handle: IO[str], results_csv: Path, values: Mapping[str, Any]) -> bool:
    """Write `values` in place of the rows of the same run (the whole file replaced atomically), if there are any;
    False when the run has no row yet, so the caller appends."""
    run_id = str(values.get("run_id") or "")
    handle.seek(0)
    rows = list(csv.DictReader(handle))
    if not run_id or not any(r.get("run_id") == run_id for r in rows):
        return False
    kept = [r for r in rows if r.get("run_id") != run_id]
    new = {k: ("" if values.get(k) is None else values[k]) for k in RESULTS_COLUMNS}

    def write(out: IO[str]) -> None:
        writer = csv.DictWriter(out, fieldnames=RESULTS_COLUMNS, extrasaction="ignore")
        writer.writeheader()
        writer.writerows([*kept, new])

    atomic_write(results_csv, write)
    return True


def _upgrade_header(handle: IO[str], results_csv: Path) -> None:
    """Rewrite an older results.csv under RESULTS_COLUMNS (unknown old columns kept at the end), atomically."""
    handle.seek(0)
    rows = list(csv.DictReader(handle))
    extra = [c for c in (rows[0].keys() if rows else []) if c not in RESULTS_COLUMNS and c is not None]

    def write(out: IO[str]) -> None:
        writer = csv.DictWriter(out, fieldnames=[*RESULTS_COLUMNS, *extra], extrasaction="ignore")
        writer.writeheader()
        writer.writerows(rows)

    atomic_write(results_csv, write)


def read_results(results_csv: Path) -> list[dict[str, str]]:
    if not results_csv.exists():
        return []
    with open(results_csv, newline="") as handle:
        return list(csv.DictReader(handle))
