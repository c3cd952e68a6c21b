"""Who may call the run service, over real HTTP against the real app (uvicorn on a free loopback port).

Every route of the app is enumerated, so a route added later is checked too: writes without a token get 401, with
too low a role 403, and nothing is written. Also: the decision records the token's user, the bind refusal, and the
`rlloop serve users` commands in a real subprocess (token shown once, stored hashed, file mode 0600).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import stat
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from fastapi.routing import APIRoute
from starlette.routing import BaseRoute

from agent.core.records import Proposal, TrialRecord
from agent.loop.approvals import publish_pending, read_decision
from agent.service import ServiceSettings, create_app, serve
from agent.service.auth import (
    ADMIN_TOKEN_FILE_NAME,
    TOKENS_ENV,
    USERS_FILE_NAME,
    InsecureBindError,
    ServiceUser,
    TokenFileError,
    UsersDocument,
    UsersFileError,
    check_bind,
    ensure_admin_token,
    hash_token,
    is_loopback,
)
from agent.service.guard import OPEN_PATHS, SAFE_METHODS, required_role
from tests.agent.service.support import add_users, free_port, running_service

ROLES = {"val": "viewer", "ada": "approver", "root": "admin"}
PARAMS = {"run_id": "r1", "trial_id": "t01"}


@pytest.fixture
def home(tmp_path: Path) -> Path:
    home = tmp_path / "home"
    publish_pending(
        home / "runs" / "r1",
        TrialRecord(trial_id="t01", index=1, proposal=Proposal(hypothesis="h", recipe="sft")),
    )
    return home


def _routes(routes: list[BaseRoute]) -> list[tuple[str, str]]:
    """(method, path) of every API route, path parameters filled in."""
    found = []
    for route in routes:
        if isinstance(route, APIRoute):
            for method in sorted(route.methods or ()):
                found.append((method, route.path))
        else:  # docs and schema: plain Starlette routes, which the app-wide dependency does not cover
            methods = getattr(route, "methods", None) or set()
            assert methods <= SAFE_METHODS, f"{route} accepts {methods} without the auth dependency"
    return found


def _url(path: str) -> str:
    return re.sub(r"\{(\w+)\}", lambda m: PARAMS[m.group(1)], path)


def _auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_every_route_refuses_missing_tokens_and_too_low_roles(home: Path) -> None:
    tokens = add_users(home, ROLES)
    routes = _routes(create_app(ServiceSettings(home=home)).routes)
    writes = [(m, p) for m, p in routes if m not in SAFE_METHODS]
    assert {("POST", "/runs"), ("POST", "/runs/{run_id}/cancel"), ("POST", "/runs/{run_id}/resume")} <= set(
        writes
    )
    assert ("POST", "/approvals/{run_id}/{trial_id}") in writes
    # bodies the allowed roles get past validation with (a decision) or not (a run with loop_n 0)
    bodies = {
        "/runs": {"run_id": "must-not-exist", "loop_n": 0},
        "/approvals/{run_id}/{trial_id}": {"action": "approve"},
    }
    with running_service(home) as client:
        for method, path in routes:
            needed = required_role(method, path)
            url = _url(path)
            if needed is None:
                assert path in OPEN_PATHS
                assert client.request(method, url).status_code == 200, path
                continue
            json_body = bodies.get(path, {}) if method not in SAFE_METHODS else None
            missing = client.request(method, url, json=json_body)
            assert missing.status_code == 401, (method, path, missing.text)
            assert missing.headers["www-authenticate"].startswith("Bearer")
            assert f"role {needed}" in missing.json()["detail"] and "rlloop serve users add" in missing.text
            wrong = client.request(method, url, json=json_body, headers=_auth("rll_not-a-token"))
            assert wrong.status_code == 401 and 'error="invalid_token"' in wrong.headers["www-authenticate"]
            for name, role in ROLES.items():
                response = client.request(method, url, json=json_body, headers=_auth(tokens[name]))
                allowed = ["viewer", "approver", "admin"].index(role) >= [
                    "viewer",
                    "approver",
                    "admin",
                ].index(needed)
                if allowed:
                    assert response.status_code not in (401, 403), (method, path, name, response.text)
                else:
                    assert response.status_code == 403, (method, path, name, response.text)
                    detail = response.json()["detail"]
                    assert (
                        f"needs a bearer token of role {needed}" in detail
                        and f"{name} has role {role}" in detail
                    )
            if method not in SAFE_METHODS and needed != "viewer":
                assert needed == ("approver" if path.startswith("/approvals/") else "admin")
        # what the refused writes would have done did not happen (the admin's /runs call failed validation)
        assert not (home / "runs" / "must-not-exist").exists()
    decision = read_decision(home / "runs" / "r1", "t01")
    assert decision is not None and decision.by == "root"  # the approver's, then the admin's decision


def test_decision_records_the_tokens_user_not_the_body(home: Path) -> None:
    tokens = add_users(home, ROLES)
    run_dir = home / "runs" / "r1"
    with running_service(home, token=tokens["ada"]) as client:
        assert client.get("/auth/me").json() == {"user": "ada", "role": "approver", "auth_required": True}
        impostor = client.post("/approvals/r1/t01", json={"action": "approve", "by": "root"})
        assert impostor.status_code == 403 and "signed in as 'ada'" in impostor.json()["detail"]
        assert read_decision(run_dir, "t01") is None
        ok = client.post("/approvals/r1/t01", json={"action": "reject", "reason": "too slow"})
        assert ok.status_code == 200, ok.text
        assert ok.json()["decision"]["by"] == "ada"
        decision = read_decision(run_dir, "t01")
        assert decision is not None and decision.by == "ada" and decision.reason == "too slow"
        same = client.post("/approvals/r1/t01", json={"action": "approve", "by": "ada"})  # old clients
        assert same.status_code == 200
        assert json.loads((run_dir / "approvals" / "t01.decision.json").read_text())["by"] == "ada"
        assert client.post("/runs/r1/cancel").status_code == 403  # an approver cannot cancel
        assert client.get("/health").status_code == 200 and client.get("/").status_code == 200


def test_users_from_the_environment_and_changes_without_restart(
    home: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    env_token = "rll_from-the-environment"
    document = UsersDocument(users=[ServiceUser(name="ci", role="admin", token_sha256=hash_token(env_token))])
    monkeypatch.setenv(TOKENS_ENV, document.model_dump_json())
    with running_service(home) as client:
        assert client.get("/auth/me", headers=_auth(env_token)).json()["user"] == "ci"
        assert client.get("/runs").status_code == 401  # users exist (in the environment): tokens needed
        later = add_users(home, {"late": "viewer"})["late"]
        assert client.get("/runs", headers=_auth(later)).status_code == 200  # the file is re-read
        (home / USERS_FILE_NAME).write_text('{"users": []}')
        assert client.get("/runs", headers=_auth(later)).status_code == 401  # removed: refused at once
        assert client.get("/runs").status_code == 401  # still enforced with the file emptied


def test_require_auth_without_users_answers_only_health(home: Path) -> None:
    with running_service(home, require_auth=True, anonymous=True) as client:
        assert client.get("/health").status_code == 200
        assert client.get("/runs").status_code == 401
        assert client.post("/runs/r1/cancel").status_code == 401


def test_no_auth_stays_open_on_loopback_but_refuses_cross_site_writes(home: Path) -> None:
    with running_service(home, no_auth=True) as client:
        assert client.get("/auth/me").json() == {"user": None, "role": "admin", "auth_required": False}
        health = client.get("/health").json()
        assert health["auth"] == "open" and health["admin_token_file"] is None  # the page shows its banner
        assert client.get("/runs").status_code == 200  # anonymous, as asked
        assert client.post("/runs/nope/cancel").status_code == 404  # open: reaches the route
        evil = client.post("/runs/nope/cancel", headers={"Origin": "http://evil.example"})
        assert evil.status_code == 403 and "cross-origin" in evil.json()["detail"]
        own = client.post("/runs/nope/cancel", headers={"Origin": str(client.base_url)})
        assert own.status_code == 404
        rebound = client.get("/runs", headers={"Host": "attacker.example"})  # DNS rebinding
        assert rebound.status_code == 403 and "loopback" in rebound.json()["detail"]
        ok = client.post("/approvals/r1/t01", json={"action": "approve", "by": "grace"})
        assert ok.status_code == 200  # the free-text reviewer name is kept when there are no users
    decision = read_decision(home / "runs" / "r1", "t01")
    assert decision is not None and decision.by == "grace"
    assert not (home / ADMIN_TOKEN_FILE_NAME).exists()  # an open service makes no token


def test_a_fresh_service_signs_in_with_the_admin_token_it_made(home: Path) -> None:
    token_file = home / ADMIN_TOKEN_FILE_NAME
    with running_service(home, anonymous=True) as client:
        refused = client.get("/runs")
        # where to look, in words: the file's name in the service's home, never this machine's paths
        assert (
            refused.status_code == 401
            and f"RLLOOP_HOME as {ADMIN_TOKEN_FILE_NAME}" in refused.json()["detail"]
        )
        assert "/#token=" in refused.json()["detail"]  # says how to sign the page in
        cancel = client.post("/runs/nope/cancel")
        assert cancel.status_code == 401 and ADMIN_TOKEN_FILE_NAME in cancel.json()["detail"]
        for answer in (refused, cancel, client.get("/health")):
            assert str(home) not in answer.text and str(home.resolve()) not in answer.text, answer.text
        assert client.post("/approvals/r1/t01", json={"action": "approve"}).status_code == 401
        assert read_decision(home / "runs" / "r1", "t01") is None
        health = client.get("/health").json()
        assert health == {
            "status": "ok",
            "running": 0,
            "auth": "token",
            "admin_token_file": f"RLLOOP_HOME/{ADMIN_TOKEN_FILE_NAME}",
        }

        assert stat.S_IMODE(token_file.stat().st_mode) == 0o600
        token = token_file.read_text().strip()
        assert re.fullmatch(r"rll_[A-Za-z0-9_-]{43}", token)
        me = client.get("/auth/me", headers=_auth(token)).json()
        assert me == {"user": "admin", "role": "admin", "auth_required": True}
        signed_in = client.get("/health", headers=_auth(token)).json()  # an admin is told the paths
        assert signed_in["admin_token_file"] == str(token_file.resolve())
        assert signed_in["home"] == str(home.resolve())
        assert client.post("/runs/nope/cancel", headers=_auth(token)).status_code == 404  # admin: reaches it
        decided = client.post("/approvals/r1/t01", json={"action": "approve"}, headers=_auth(token))
        assert decided.status_code == 200 and decided.json()["decision"]["by"] == "admin"
    with running_service(home, anonymous=True) as client:  # a second start reuses the token
        assert token_file.read_text().strip() == token
        assert client.get("/runs").status_code == 401
        assert client.get("/auth/me", headers=_auth(token)).json()["role"] == "admin"
    # users added later keep working as before, and the admin token stays accepted while its file is there
    tokens = add_users(home, {"val": "viewer"})
    with running_service(home, anonymous=True) as client:
        assert client.get("/auth/me", headers=_auth(tokens["val"])).json()["role"] == "viewer"
        assert client.get("/auth/me", headers=_auth(token)).json()["role"] == "admin"
        assert client.get("/runs").status_code == 401


def test_an_unsafe_or_broken_token_file_is_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    token_file = home / ADMIN_TOKEN_FILE_NAME
    token, created = ensure_admin_token(token_file)
    assert created and ensure_admin_token(token_file) == (token, False)

    token_file.chmod(0o644)
    with pytest.raises(TokenFileError, match=r"mode 0644: others may read the admin token. It must be 0600"):
        create_app(ServiceSettings(home=home))
    token_file.chmod(0o600)

    token_file.unlink()
    elsewhere = tmp_path / "elsewhere"
    elsewhere.write_text(token + "\n")
    elsewhere.chmod(0o600)
    token_file.symlink_to(elsewhere)
    with pytest.raises(TokenFileError, match="is a symlink; it is never followed"):
        create_app(ServiceSettings(home=home))
    token_file.unlink()

    token_file.write_text("not a token\n")
    token_file.chmod(0o600)
    with pytest.raises(TokenFileError, match="does not hold one token"):
        create_app(ServiceSettings(home=home))

    if os.getuid() != 0:  # root reads anything
        token_file.write_text(token)
        token_file.chmod(0o000)
        with pytest.raises(TokenFileError, match="cannot read the admin token file"):
            create_app(ServiceSettings(home=home))

    add_users(home, {"root": "admin"})
    with pytest.raises(UsersFileError, match="--no-auth, but users are configured"):
        create_app(ServiceSettings(home=home, no_auth=True))
    with pytest.raises(ValueError, match="no_auth and require_auth contradict"):
        ServiceSettings(home=home, no_auth=True, require_auth=True)


def test_cross_origin_writes_are_refused_even_with_a_token(home: Path) -> None:
    tokens = add_users(home, {"root": "admin"})
    with running_service(home, token=tokens["root"]) as client:
        refused = client.post("/runs/nope/cancel", headers={"Origin": "null"})
        assert refused.status_code == 403
        assert client.post("/runs/nope/cancel").status_code == 404


@pytest.mark.parametrize(
    ("host", "loopback"),
    [
        ("127.0.0.1", True),
        ("127.5.5.5", True),
        ("::1", True),
        ("[::1]", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("", False),
        ("192.168.1.10", False),
        ("example.com", False),
    ],
)
def test_is_loopback(host: str, loopback: bool) -> None:
    assert is_loopback(host) is loopback


def test_serve_refuses_to_bind_beyond_loopback_without_an_admin(tmp_path: Path) -> None:
    home = tmp_path / "home"
    with pytest.raises(InsecureBindError, match=r"rlloop serve users add NAME --role admin"):
        serve(
            ServiceSettings(home=home, no_auth=True), "0.0.0.0", free_port()
        )  # an open service: loopback only
    assert not (home / ADMIN_TOKEN_FILE_NAME).exists()
    add_users(
        home, {"ada": "approver"}
    )  # an approver (and no admin token) is not enough: nobody could manage runs
    with pytest.raises(InsecureBindError, match="refusing to listen on 0.0.0.0"):
        serve(ServiceSettings(home=home), "0.0.0.0", free_port())
    admin = ServiceUser(name="root", role="admin", token_sha256=hash_token("x"))
    check_bind("0.0.0.0", [admin], home / USERS_FILE_NAME)  # with an admin: allowed
    check_bind("127.0.0.1", [], home / USERS_FILE_NAME)  # loopback: allowed without users

    cli = subprocess.run(
        [
            sys.executable,
            "-m",
            "agent.cli",
            "serve",
            "--no-auth",
            "--host",
            "0.0.0.0",
            "--port",
            str(free_port()),
        ],
        env={"RLLOOP_HOME": str(tmp_path / "other"), "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert cli.returncode == 2, cli.stderr
    assert "refusing to listen on 0.0.0.0" in cli.stderr and "without --no-auth" in cli.stderr


def _serve(home: Path, port: int, *args: str) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [sys.executable, "-m", "agent.cli", "serve", "--home", str(home), "--port", str(port), *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def _read_until(proc: subprocess.Popen[str], needle: str, timeout: float = 120) -> str:
    """What `proc` printed up to and including the first line with `needle`."""
    assert proc.stdout is not None
    seen = ""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line:
            break
        seen += line
        if needle in line:
            return seen
    raise AssertionError(f"{needle!r} never printed; got:\n{seen}")


def _stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def test_serve_prints_the_sign_in_link_or_says_loudly_that_it_is_open(tmp_path: Path) -> None:
    home, port = tmp_path / "home", free_port()
    proc = _serve(home, port)
    try:
        printed = _read_until(proc, "Uvicorn running on")
        link = re.search(r"rlloop service: sign in at (http://127\.0\.0\.1:\d+/#token=(\S+))", printed)
        assert link is not None, printed
        token_file = home / ADMIN_TOKEN_FILE_NAME
        assert link.group(2) == token_file.read_text().strip()
        assert f"the admin token is kept in {token_file.resolve()}" in printed
        assert printed.count(link.group(2)) == 1  # printed once
        base = f"http://127.0.0.1:{port}"
        refused = httpx.get(f"{base}/runs")
        assert refused.status_code == 401 and str(home.resolve()) not in refused.text
        assert ADMIN_TOKEN_FILE_NAME in refused.json()["detail"]  # the start's output says where it is
        assert httpx.get(f"{base}/auth/me", headers=_auth(link.group(2))).json()["role"] == "admin"
    finally:
        _stop(proc)

    open_home, port = tmp_path / "open", free_port()
    proc = _serve(open_home, port, "--no-auth")
    try:
        printed = _read_until(proc, "Uvicorn running on")
        assert "THIS SERVICE IS OPEN: ANYONE WHO CAN REACH IT CAN START RUNS AND APPROVE" in printed, printed
        assert "sign in at" not in printed and not (open_home / ADMIN_TOKEN_FILE_NAME).exists()
        base = f"http://127.0.0.1:{port}"
        assert httpx.get(f"{base}/health").json()["auth"] == "open"
        assert httpx.get(f"{base}/runs").status_code == 200
    finally:
        _stop(proc)


def _users(home: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "agent.cli", "serve", "users", *args, "--home", str(home)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_users_cli_shows_the_token_once_and_stores_only_its_hash(tmp_path: Path) -> None:
    home = tmp_path / "home"
    added = _users(home, "add", "ada", "--role", "approver")
    assert added.returncode == 0, added.stderr
    token = added.stdout.strip()
    assert re.fullmatch(r"rll_[A-Za-z0-9_-]{43}", token), added.stdout  # alone on stdout: TOKEN=$(...)
    assert "shown once" in added.stderr
    users_file = home / USERS_FILE_NAME
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    text = users_file.read_text()
    assert token not in text and hashlib.sha256(token.encode()).hexdigest() in text
    assert [(u["name"], u["role"]) for u in json.loads(text)["users"]] == [("ada", "approver")]

    listed = _users(home, "list")
    assert (
        listed.returncode == 0 and listed.stdout.startswith("ada\tapprover\t") and token not in listed.stdout
    )

    again = _users(home, "add", "ada")
    assert again.returncode == 2 and "already exists" in again.stderr and "--replace" in again.stderr
    bad_role = _users(home, "add", "bo", "--role", "owner")
    assert bad_role.returncode == 2 and "unknown role 'owner'" in bad_role.stderr
    bad_name = _users(home, "add", "../x")
    assert bad_name.returncode == 2 and "is not valid" in bad_name.stderr

    replaced = _users(home, "add", "ada", "--role", "admin", "--replace")
    assert replaced.returncode == 0
    new_token = replaced.stdout.strip()
    assert new_token != token and hash_token(token) not in users_file.read_text()

    with running_service(home) as client:  # the printed token works against the service
        assert client.get("/auth/me", headers=_auth(new_token)).json()["role"] == "admin"
        assert client.get("/auth/me", headers=_auth(token)).status_code == 401

    removed = _users(home, "remove", "ada")
    assert removed.returncode == 0 and json.loads(users_file.read_text())["users"] == []
    assert stat.S_IMODE(users_file.stat().st_mode) == 0o600
    missing = _users(home, "remove", "ada")
    assert missing.returncode == 2 and "no user 'ada'" in missing.stderr


def test_a_broken_users_file_stops_the_start_with_a_clear_error(tmp_path: Path) -> None:
    home = tmp_path / "home"
    home.mkdir()
    (home / USERS_FILE_NAME).write_text("{not json")
    with pytest.raises(ValueError, match="is not a valid users document"):
        create_app(ServiceSettings(home=home))
