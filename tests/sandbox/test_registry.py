"""Choosing a backend by name, and what `docker_status` / the CLI say about this machine."""

from __future__ import annotations

import logging

import pytest
from typer.testing import CliRunner

from sandbox import get_sandbox, list_backends, namespaces
from sandbox.backends.local import LocalSandbox
from sandbox.base import Sandbox, SandboxUnavailableError
from sandbox.cli import app
from sandbox.images import inputs_hash, pinned_requirements
from sandbox.registry import isolation_of, resolve_auto
from sandbox.status import docker_status


def test_local_by_name() -> None:
    sandbox = get_sandbox("local", grace_s=1)
    assert isinstance(sandbox, LocalSandbox) and isinstance(sandbox, Sandbox) and sandbox.grace_s == 1


def test_unknown_name_is_one_clear_error() -> None:
    with pytest.raises(ValueError, match="unknown sandbox 'podman': choose one of auto, docker, local"):
        get_sandbox("podman")
    assert "auto" in list_backends()


def test_auto_falls_back_to_local_with_one_warning(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="rlloop.sandbox"):
        sandbox = get_sandbox("auto", image="rlloop/no-such-image:never")
    assert isinstance(sandbox, LocalSandbox)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    if isolation_of(sandbox) == "namespaces":  # isolated: nothing to warn about
        assert not warnings
    else:
        assert len(warnings) == 1 and "NO isolation (isolation=none)" in warnings[0].getMessage()


def test_auto_is_decided_in_one_place() -> None:
    """`resolve_auto` says what "auto" is and why; a Ray node's inner "auto" is the same answer."""
    from sandbox.backends.ray import RaySandbox

    missing = resolve_auto("rlloop/no-such-image:never")
    assert missing.name == "local" and ("missing" in missing.reason or "not reachable" in missing.reason)
    assert RaySandbox(inner="auto").inner == resolve_auto().name


def test_isolation_is_declared_per_backend() -> None:
    assert isolation_of(get_sandbox("local", isolate=False)) == "none"
    unisolated = LocalSandbox(isolate=False)
    assert unisolated.isolation == "none" and unisolated.bwrap is None
    if namespaces.probe().isolated:
        assert isolation_of(get_sandbox("local")) == "namespaces"
    else:
        with pytest.raises(SandboxUnavailableError, match="cannot isolate trials here"):
            get_sandbox("local")


def test_docker_status_for_a_missing_image() -> None:
    status = docker_status("rlloop/no-such-image:never")
    assert not status.image_present and not status.usable
    assert ("missing" in status.summary()) or ("not reachable" in status.summary())


def test_inputs_hash_is_stable_and_tracks_requirements() -> None:
    reqs = pinned_requirements()
    assert any(r.startswith("torch==") for r in reqs) and not any("+" in r for r in reqs)
    assert inputs_hash(False, None, reqs) == inputs_hash(False, None, reqs)
    assert inputs_hash(False, None, reqs) != inputs_hash(False, None, [*reqs, "extra==1"])
    assert inputs_hash(False, None, reqs) != inputs_hash(False, "rlloop/base:bookworm", reqs)


def test_cli_check_answers_in_one_line() -> None:
    result = CliRunner().invoke(app, ["check"])
    assert result.exit_code in (0, 1)
    assert (
        result.output.strip()
        .splitlines()[0]
        .startswith(("docker ready", "image ", "docker engine not reachable"))
    )
