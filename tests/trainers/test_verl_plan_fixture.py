"""The per-family builders plan exactly what the one-function planner planned, for every case of the grid."""

from __future__ import annotations

import json
from typing import Any

import pytest

from tests.trainers.verl_plan_grid import CLI, FIXTURE, cases, record, record_cli, with_text

EXPECTED: dict[str, Any] = json.loads(FIXTURE.read_text(encoding="utf-8"))


def test_the_grid_is_the_recorded_one() -> None:
    assert sorted(cases()) == sorted(EXPECTED["plans"])
    assert sorted(CLI) == sorted(EXPECTED["cli"])


@pytest.mark.parametrize("name", sorted(EXPECTED["plans"]))
def test_plan_matches_the_recorded_one(name: str) -> None:
    assert record(cases()[name], text=with_text(name)) == EXPECTED["plans"][name]


@pytest.mark.parametrize("name", sorted(EXPECTED["cli"]))
def test_plan_cli_matches_the_recorded_one(name: str) -> None:
    assert record_cli(CLI[name]) == EXPECTED["cli"][name]
