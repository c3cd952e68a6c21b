"""Answer extraction and matching: the same functions as `tasks.answers` (trainers import them from there)."""

from __future__ import annotations

from tasks.answers import extract_number, first_number, normalize_number, numbers_match

__all__ = ["extract_number", "first_number", "normalize_number", "numbers_match"]
