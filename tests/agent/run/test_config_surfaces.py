"""One config surface: for every RunConfig field, `rlloop run`, a sweep's `run_overrides` and the service's
`POST /runs` accept the same text and refuse the same text with RunConfig's own message ("3m" is a duration
everywhere, smoke_timeout and llm_script_timeout included)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from fastapi.testclient import TestClient
from pydantic import ValidationError
from typer.testing import CliRunner

import agent.cli.commands as commands
from agent.run.config import RunConfig, is_duration, run_config_of
from agent.run.options import flag_name
from agent.service import ServiceSettings, create_app
from agent.service.schemas import SERVICE_OWNED_FIELDS
from agent.service.workers import RunConflictError
from agent.sweeps.spec import SweepSpec

# A value each field accepts where its default says nothing (None, or a text any string would do).
GOOD: dict[str, str] = {
    "home": "elsewhere",
    "system_prompt": "Answer briefly.",
    "driver_model": "gpt-4o-mini",
    "recipes": "sft, grpo",
    "ray_address": "auto",
    "run_id": "a-run.1",
    "llm_price_file": "prices.yaml",
    "mlflow_tracking_uri": "sqlite:///m.db",
    "agent_llm_base_url": "http://127.0.0.1:9/v1",
    "agent_llm_key_env": "OPENAI_API_KEY",
    "agent_llm_models": "a, b",
    "approval": "code,budget",
    "prompt_format": "chat",
    "submit": "final",
}
# Text a field refuses, besides what its type refuses ("soon" for a number, "3x" for a duration).
BAD: dict[str, list[str]] = {
    "benchmark": ["no-such-bench"],
    "sandbox": ["podman"],
    "proposer": ["oracle"],
    "recipes": ["sft,nope"],
    "approval": ["sometimes"],
    "prompt_format": ["html"],
    "submit": ["some"],
    "run_id": ["../escape"],
    "agent_llm_key_env": ["sk-this-is-a-key"],
    "loop_n": ["0"],
    "timeout": ["-3m", "0"],
    "public_fraction": ["1.0"],
}


def _kind(name: str) -> str:
    info = RunConfig.model_fields[name]
    if is_duration(info):
        return "duration"
    return " ".join(str(info.annotation).split())


def good_value(name: str) -> str:
    if name in GOOD:
        return GOOD[name]
    if is_duration(RunConfig.model_fields[name]):
        return "3m"
    default = RunConfig.model_fields[name].default
    if "int" in _kind(name):
        return str(default if isinstance(default, int) else 3)
    if "float" in _kind(name):
        return str(default if isinstance(default, float) else 2.5)
    assert default is not None, f"add a value {name} accepts to GOOD"
    return str(default)


def bad_values(name: str) -> list[str]:
    kind = _kind(name)
    found = list(BAD.get(name, []))
    if kind == "duration":
        found.append("3x")
    elif "int" in kind or "float" in kind:
        found.append("soon")
    return found


TEXT_FIELDS = [name for name, info in RunConfig.model_fields.items() if info.annotation is not bool]
BOOL_FIELDS = [name for name, info in RunConfig.model_fields.items() if info.annotation is bool]
CASES = [(name, value) for name in TEXT_FIELDS for value in bad_values(name)]


def refusal(name: str, value: Any) -> str:
    """RunConfig's own message for `name: value`."""
    with pytest.raises(ValidationError) as caught:
        run_config_of({name: value})
    (error,) = [e for e in caught.value.errors() if e["loc"] == (name,)]
    return str(error["msg"])


@pytest.fixture(scope="module")
def service(tmp_path_factory: pytest.TempPathFactory) -> Any:
    """The service's real app and route; a request that passes validation reaches the worker pool, which records it
    and answers 409 instead of starting a run."""
    home = tmp_path_factory.mktemp("service-home")
    app = create_app(ServiceSettings(home=home, no_auth=True))
    received: list[RunConfig] = []

    def submit(config: RunConfig) -> None:
        received.append(config)
        raise RunConflictError("recorded")

    app.state.pool.submit = submit
    with TestClient(app, base_url="http://127.0.0.1") as client:
        yield client, received


class Surfaces:
    """Hand one field's text to each surface; say what each made of it, or its message."""

    def __init__(self, service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
        self.client, self.received = service
        self.configs: list[RunConfig] = []
        monkeypatch.setattr(
            commands, "_execute", lambda config, resume_run_id=None: self.configs.append(config)
        )
        for name in RunConfig.model_fields:
            monkeypatch.delenv(f"RLLOOP_{name.upper()}", raising=False)

    def cli(self, name: str, value: str) -> tuple[Any, str]:
        args = [flag_name(name)] if value is True else [flag_name(name), value]
        result = CliRunner().invoke(commands.app, ["run", *args], env={"COLUMNS": "2000"})
        if result.exit_code == 0:
            return getattr(self.configs.pop(), name), ""
        assert result.exit_code == 2, result.output
        return None, " ".join(result.output.split())

    def sweep(self, name: str, value: Any) -> tuple[Any, str]:
        try:
            spec = SweepSpec(benchmarks="arith", base_models="tiny-arith", run_overrides={name: value})
        except ValidationError as exc:
            return None, str(exc.errors()[0]["msg"])
        return getattr(run_config_of(spec.run_overrides), name), ""

    def service(self, name: str, value: Any) -> tuple[Any, str]:
        response = self.client.post("/runs", json={name: value})
        if response.status_code == 409:
            return getattr(self.received.pop(), name), ""
        assert response.status_code == 422, response.text
        (error,) = [e for e in response.json()["detail"] if e["loc"] == ["body", name]]
        return None, str(error["msg"])


@pytest.mark.parametrize("name", TEXT_FIELDS)
def test_every_surface_reads_a_good_value_alike(
    name: str, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    surfaces = Surfaces(service, monkeypatch)
    value = good_value(name)
    expected = getattr(run_config_of({name: value}), name)
    assert surfaces.cli(name, value) == (expected, "")
    assert surfaces.sweep(name, value) == (expected, "")
    if name not in SERVICE_OWNED_FIELDS:
        assert surfaces.service(name, value) == (expected, "")


@pytest.mark.parametrize(("name", "value"), CASES)
def test_every_surface_refuses_a_bad_value_with_one_message(
    name: str, value: str, service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    surfaces = Surfaces(service, monkeypatch)
    message = refusal(name, value)
    cli_value, cli_message = surfaces.cli(name, value)
    assert cli_value is None and f"{flag_name(name)}: {' '.join(message.split())}" in cli_message
    sweep_value, sweep_message = surfaces.sweep(name, value)
    assert sweep_value is None and f"{name}: {message}" in sweep_message
    if name not in SERVICE_OWNED_FIELDS:
        assert surfaces.service(name, value) == (None, message)


@pytest.mark.parametrize("name", BOOL_FIELDS)
def test_switches_mean_the_same_everywhere(name: str, service: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    surfaces = Surfaces(service, monkeypatch)
    assert surfaces.cli(name, True) == (True, "")  # type: ignore[arg-type]
    assert surfaces.sweep(name, True) == (True, "")
    assert surfaces.service(name, True) == (True, "")
    assert (
        surfaces.service(name, "maybe")[1]
        == refusal(name, "maybe")
        == surfaces.sweep(name, "maybe")[1].split(f"{name}: ")[-1]
    )


def test_three_minutes_is_a_duration_for_every_duration_field(
    service: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    surfaces = Surfaces(service, monkeypatch)
    durations = [name for name, info in RunConfig.model_fields.items() if is_duration(info)]
    assert {"smoke_timeout", "llm_script_timeout", "timeout", "trial_timeout"} <= set(durations)
    for name in durations:
        for read in (surfaces.cli, surfaces.sweep, surfaces.service):
            assert read(name, "3m") == (180.0, ""), (name, read)


def test_every_field_has_one_description_that_the_cli_and_the_service_show(service: Any) -> None:
    client, _ = service
    schema = client.get("/openapi.json").json()["components"]["schemas"]["RunRequest"]["properties"]
    help_text = " ".join(
        CliRunner().invoke(commands.app, ["run", "--help"], env={"COLUMNS": "2000"}).output.split()
    )
    for name, info in RunConfig.model_fields.items():
        assert info.description, f"RunConfig.{name} needs a description"
        assert info.description in help_text, name
        if name not in SERVICE_OWNED_FIELDS:
            assert schema[name]["description"] == info.description


def test_old_flag_spellings_still_work(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    configs: list[RunConfig] = []
    monkeypatch.setattr(commands, "_execute", lambda config, resume_run_id=None: configs.append(config))
    config_file = tmp_path / "run.yaml"
    config_file.write_text("loop-n: 3\n")
    result = CliRunner().invoke(
        commands.app, ["run", "--ray", "auto", "--config", str(config_file), "--quiet", "--memory"]
    )
    assert result.exit_code == 0, result.output
    (config,) = configs
    assert (config.ray_address, config.loop_n, config.quiet, config.memory) == ("auto", 3, True, True)
