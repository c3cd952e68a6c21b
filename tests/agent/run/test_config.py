"""Run configuration: durations, env vars and flags of the same names, clear errors."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from agent.run.config import RunConfig, load_config_file, parse_duration


def test_durations() -> None:
    assert parse_duration("20m") == 1200
    assert parse_duration("1.5h") == 5400
    assert parse_duration("90") == 90
    with pytest.raises(ValueError, match="duration"):
        parse_duration("soon")


def test_env_vars_use_the_flag_names(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("RLLOOP_LOOP_N", "7")
    monkeypatch.setenv("RLLOOP_TIMEOUT", "5m")
    config = RunConfig()
    assert config.loop_n == 7 and config.timeout == 300
    assert RunConfig(loop_n=2).loop_n == 2  # explicit values (CLI flags) win


def test_bad_values_are_rejected_with_the_field_name() -> None:
    with pytest.raises(ValidationError, match="loop_n"):
        RunConfig(loop_n=0)
    with pytest.raises(ValidationError, match="approval"):
        RunConfig(approval="sometimes")
    assert RunConfig(approval="code, budget").approval == "code,budget"


def test_config_file(tmp_path: Path) -> None:
    path = tmp_path / "run.yaml"
    path.write_text("loop-n: 3\nbenchmark: arith\n")
    assert load_config_file(path) == {"loop_n": 3, "benchmark": "arith"}
    (tmp_path / "bad.yaml").write_text("- a list\n")
    with pytest.raises(ValueError, match="mapping"):
        load_config_file(tmp_path / "bad.yaml")


def test_every_config_field_is_a_cli_flag_of_the_same_name() -> None:
    import inspect

    from agent.cli.commands import run

    flags = set(inspect.signature(run).parameters)
    assert set(RunConfig.model_fields) <= flags, set(RunConfig.model_fields) - flags


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("benchmark", "nope", "unknown benchmark 'nope': choose one of .*arith"),
        ("recipes", "sft,nope", "unknown recipe 'nope': choose one of .*grpo"),
        ("sandbox", "podman", "unknown sandbox 'podman': choose one of auto"),
        ("proposer", "oracle", "unknown proposer 'oracle': choose one of auto"),
    ],
)
def test_names_are_checked_against_their_registries_when_the_config_is_built(
    field: str, value: str, message: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    with pytest.raises(ValidationError, match=message):
        RunConfig(**{field: value})  # type: ignore[arg-type]
    monkeypatch.setenv(f"RLLOOP_{field.upper()}", value)
    with pytest.raises(ValidationError, match=message):
        RunConfig()  # from the environment alike


def test_known_names_pass_and_recipes_are_tidied() -> None:
    config = RunConfig(benchmark="countdown", recipes=" sft , grpo ,")
    assert config.benchmark == "countdown" and config.recipes == "sft,grpo"
    assert RunConfig(recipes="").recipes is None


def test_a_fresh_process_finds_the_builtin_proposers_without_importing_them_first() -> None:
    """The run's config sits below the proposers: their registrar comes from rlloop's own entry point group, so a
    process that imported nothing but the config (a test, a script, `python -m agent.launch FILE`) checks a
    built-in name, and an unknown one fails listing the built-ins."""
    import subprocess
    import sys

    script = (
        "import sys\n"
        "from agent.run import RunConfig\n"
        "assert 'agent.proposers' not in sys.modules\n"
        "assert RunConfig(proposer='tree').proposer == 'tree'\n"
        "from agent.run import PROPOSERS\n"
        "print(PROPOSERS.origin('tree'))\n"
        "try:\n"
        "    RunConfig(proposer='oracle')\n"
        "except ValueError as exc:\n"
        "    print(str(exc).splitlines()[2])\n"
    )
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    origin, message = done.stdout.strip().splitlines()
    assert origin == "agent.proposers"
    assert "unknown proposer 'oracle': choose one of auto, builtin," in message and "tree" in message
