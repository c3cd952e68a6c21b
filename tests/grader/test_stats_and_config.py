"""Bootstrap error bars and the evaluation config's identity."""

from __future__ import annotations

import json
import random
from pathlib import Path

import pytest

from grader.config import EvalConfig, GraderConfig
from grader.stats import bootstrap_ci, summarize


def _scores(n: int, p: float = 0.4, seed: int = 1) -> list[float]:
    rng = random.Random(seed)
    return [1.0 if rng.random() < p else 0.0 for _ in range(n)]


def test_ci_contains_mean_and_narrows_with_n() -> None:
    widths = []
    for n in (20, 200, 2000):
        scores = _scores(n)
        summary = summarize(scores, seed=0)
        assert summary.ci_low <= summary.score <= summary.ci_high
        assert summary.n == n
        widths.append(summary.ci_high - summary.ci_low)
    assert widths[0] > widths[1] > widths[2] > 0
    assert widths[1] / widths[2] == pytest.approx(10**0.5, rel=0.35)  # ~ 1/sqrt(n)


def test_ci_is_seeded_and_degenerate_cases() -> None:
    scores = _scores(100)
    assert bootstrap_ci(scores, seed=3) == bootstrap_ci(scores, seed=3)
    assert bootstrap_ci([1.0] * 50) == (1.0, 1.0)
    assert bootstrap_ci([0.5]) == (0.5, 0.5)
    with pytest.raises(ValueError, match="no scores"):
        bootstrap_ci([])


def test_eval_config_identity() -> None:
    base = EvalConfig()
    assert base.identity() == EvalConfig().identity()
    assert (
        base.identity() == EvalConfig(batch_size=7, engine="hf").identity()
    )  # speed knobs keep the identity
    changed = [
        EvalConfig(prompt_format="cot"),
        EvalConfig(few_shot=4),
        EvalConfig(temperature=0.7),
        EvalConfig(seed=1),
        EvalConfig(max_new_tokens=10),
        EvalConfig(limit=5),
    ]
    identities = {c.identity() for c in changed}
    assert len(identities) == len(changed) and base.identity() not in identities
    with pytest.raises(ValueError):
        EvalConfig(bogus=1)  # type: ignore[call-arg]


def test_grader_config_refuses_private_dir_inside_root(tmp_path: Path) -> None:
    good = {
        "run_id": "r1",
        "benchmark": "arith",
        "base_model": str(tmp_path / "base"),
        "private_dir": str(tmp_path / "private"),
        "token": "x" * 16,
        "allowed_roots": [str(tmp_path / "workspace")],
    }
    assert GraderConfig.model_validate(good).host == "127.0.0.1"
    with pytest.raises(ValueError, match="overlaps allowed root"):
        GraderConfig.model_validate({**good, "private_dir": str(tmp_path / "workspace" / "grader")})
    path = tmp_path / "bad.json"
    path.write_text(json.dumps({**good, "token": "short"}))
    with pytest.raises(ValueError, match="invalid grader config"):
        GraderConfig.from_file(path)
    with pytest.raises(ValueError, match="cannot read"):
        GraderConfig.from_file(tmp_path / "missing.json")
