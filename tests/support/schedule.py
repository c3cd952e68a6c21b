"""Longest test files first, so that the suite's two workers finish together.

pytest-xdist's `--dist loadscope` hands out whole files in the order it is given; by default it orders them by how
many tests they hold, which sends the slow single-test files (a whole run, a Ray cluster) last and leaves one worker
alone with them at the end. Given the seconds each file took last time (`tests/durations.json`, written by a run
with RLLOOP_TEST_DURATIONS_OUT set, as `make test` does into .test-logs/), this plugin orders the files by those
seconds, longest first: the classic longest-processing-time schedule, whose tail is at most one file. A file with
no figure yet (a new one) counts as `UNKNOWN_SECONDS`. `.ci/test.sh` passes `--no-loadscope-reorder` so that xdist
keeps this order.

Refresh the figures after a change that moves them: `cp .test-logs/durations.json tests/durations.json`.
"""

from __future__ import annotations

import json
import os
from collections import defaultdict
from pathlib import Path

import pytest

from tasks.atomic import atomic_write_text

DURATIONS = Path(__file__).resolve().parents[1] / "durations.json"
OUT_ENV = "RLLOOP_TEST_DURATIONS_OUT"
UNKNOWN_SECONDS = 30.0  # a new file: neither first nor last


def _file_of(nodeid: str) -> str:
    return nodeid.split("::", 1)[0]


def _known_seconds() -> dict[str, float]:
    try:
        data = json.loads(DURATIONS.read_text())
    except (OSError, ValueError):
        return {}
    return {str(k): float(v) for k, v in data.items()} if isinstance(data, dict) else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    known = _known_seconds()
    if not known:
        return
    # stable: a file's tests keep their order, files with equal figures keep theirs
    items.sort(key=lambda item: -known.get(_file_of(item.nodeid), UNKNOWN_SECONDS))


_measured: defaultdict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    """Every phase's seconds (setup with its module fixtures, call, teardown), summed per file. Under xdist the
    controller sees every worker's reports here."""
    _measured[_file_of(report.nodeid)] += report.duration


def pytest_sessionfinish(session: pytest.Session) -> None:
    out = os.environ.get(OUT_ENV)
    if not out or hasattr(session.config, "workerinput") or not _measured:
        return  # a worker's own figures are the controller's too
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    figures = {name: round(seconds, 1) for name, seconds in sorted(_measured.items(), key=lambda kv: -kv[1])}
    atomic_write_text(path, json.dumps(figures, indent=1) + "\n")
