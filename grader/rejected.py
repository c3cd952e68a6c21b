"""A request the grader refuses, with the HTTP status the server answers it with (`grader.server`)."""

from __future__ import annotations


class SubmissionRejected(Exception):
    """A request the service refuses; `status_code` is the HTTP status, the message is safe to return."""

    def __init__(self, status_code: int, reason: str, submission_id: int | None = None) -> None:
        super().__init__(reason)
        self.status_code = status_code
        self.reason = reason
        self.submission_id = submission_id
