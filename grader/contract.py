"""The grader's contract with whoever runs it: its config (`GraderConfig`, the JSON file `python -m grader serve
--config` reads) and the answers of its routes, as types. The server answers with these models and the agent's
client (`agent.run.grading`) builds the config and reads the answers through them, so both sides share one
definition. The JSON keys are the AutoRL-Bench-compatible ones external agents read; they do not change."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field

from grader.config import EvalConfig, GraderConfig
from grader.figures import RunFigures

__all__ = [
    "BestSubmission",
    "EvalConfig",
    "FinalizeAnswer",
    "FlaggedSubmission",
    "GraderConfig",
    "PrivateScore",
    "SubmitAnswer",
    "SubmitRequest",
    "TrajectoryPoint",
]


class SubmitRequest(BaseModel):
    """Body of POST /submit."""

    model_config = ConfigDict(extra="ignore")

    model_path: str = Field(
        min_length=1, max_length=4096, description="absolute path of the checkpoint folder"
    )


class BestSubmission(BaseModel):
    """The best unflagged submission so far, by its public score."""

    submission_id: int
    score: float | None


class SubmitAnswer(BaseModel):
    """POST /submit's answer for a scored submission (or a duplicate of one: then the original's score)."""

    submission_id: int
    score: float
    baseline_score: float
    improvement: float
    best: BestSubmission | None
    total_submissions: int  # counted submissions (duplicates are free)
    elapsed_seconds: float
    remaining_submissions: int | None  # None: no cap
    n: int | None
    ci_low: float | None
    ci_high: float | None
    duplicate_of: int | None
    files_sha256: str | None  # of the files scored (this submission's own copy of them)
    isolation: str
    is_copy: bool
    flagged: bool
    flags: list[dict[str, Any]]
    status: str


class TrajectoryPoint(BaseModel):
    submission_id: int
    elapsed_seconds: float
    score: float | None


class FlaggedSubmission(BaseModel):
    submission_id: int
    flags: list[dict[str, Any]]


class PrivateScore(BaseModel):
    submission_id: int
    private_score: float | None


class FinalizeAnswer(BaseModel):
    """POST /finalize's answer (and the grader's final.json): the run's metrics, private scores revealed.
    `reported` holds the run's figures by the one score rule (`grader.figures`)."""

    run_id: str
    benchmark: str
    isolation: str
    finalized_at: float
    total_submissions: int
    valid_submissions: int
    valid_submission_rate: float
    duplicate_count: int
    copy_model_count: int
    flagged_submissions: list[FlaggedSubmission]
    score_trajectory: list[TrajectoryPoint]
    baseline_score: float
    best_submission_id: int | None
    best_files_sha256: str | None  # what the host checks its best against
    best_score: float
    improvement: float
    time_to_best: float | None
    baseline_private_score: float
    final_private_score: float
    private_improvement: float
    private_scores: list[PrivateScore]
    public_private_split: bool
    reported: RunFigures
