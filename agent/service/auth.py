"""Who may call the run service: users with bearer tokens and roles, stored as sha256 hashes.

Users live in a JSON file (default `RLLOOP_HOME/service_users.json`, mode 0600, written atomically) and/or in the
environment variable `RLLOOP_SERVICE_TOKENS` (the same JSON). Only hashes are stored: a token is shown once, when
`rlloop serve users add` creates it. Tokens are 256 random bits, so a plain sha256 is enough (no KDF needed), and
they are compared in constant time.
"""

from __future__ import annotations

import contextlib
import hashlib
import hmac
import ipaddress
import json
import os
import re
import secrets
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, Field, ValidationError

from tasks import once
from tasks.atomic import atomic_write_text

Role = Literal["viewer", "approver", "admin"]
ROLES: tuple[Role, ...] = ("viewer", "approver", "admin")
ROLE_RANK: dict[str, int] = {role: rank for rank, role in enumerate(ROLES)}
USERS_FILE_NAME = "service_users.json"
TOKENS_ENV = "RLLOOP_SERVICE_TOKENS"
TOKEN_PREFIX = "rll_"
NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._@-]{0,63}$")
ADD_HINT = "rlloop serve users add NAME --role admin"


class UsersFileError(ValueError):
    """The users file or RLLOOP_SERVICE_TOKENS cannot be read, or a users command got bad input."""


class InsecureBindError(RuntimeError):
    """`rlloop serve` was asked to listen beyond loopback without any admin user."""


class ServiceUser(BaseModel):
    """One user of the service. `token_sha256` is the hex sha256 of the bearer token; the token is never kept."""

    name: str = Field(pattern=NAME_PATTERN.pattern)
    role: Role
    token_sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    created_at: str = Field(default_factory=lambda: datetime.now(UTC).isoformat(timespec="seconds"))


class UsersDocument(BaseModel):
    """The users file's content (and RLLOOP_SERVICE_TOKENS')."""

    version: int = 1
    users: list[ServiceUser] = Field(default_factory=list)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_token() -> str:
    return TOKEN_PREFIX + secrets.token_urlsafe(32)


def users_file_for(home: Path, users_file: Path | None = None) -> Path:
    return users_file if users_file is not None else home / USERS_FILE_NAME


def _parse(text: str, where: str) -> list[ServiceUser]:
    try:
        data = json.loads(text)
        if isinstance(data, list):  # a bare list of users is accepted too
            data = {"users": data}
        return UsersDocument.model_validate(data).users
    except (ValueError, ValidationError) as exc:
        raise UsersFileError(
            f"{where} is not a valid users document ({exc}); it must be JSON like "
            '{"users": [{"name": "ada", "role": "admin", "token_sha256": "<64 hex>"}]}; '
            f"fix it, or remove it and create users with `{ADD_HINT}`"
        ) from None


def read_users_file(path: Path) -> list[ServiceUser]:
    """The users in `path`; none when it does not exist."""
    try:
        text = path.read_text()
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise UsersFileError(f"cannot read the users file {path} ({exc.strerror})") from None
    return _parse(text, f"the users file {path}")


def env_users() -> list[ServiceUser]:
    text = os.environ.get(TOKENS_ENV, "").strip()
    return _parse(text, f"the environment variable {TOKENS_ENV}") if text else []


def write_users_file(path: Path, users: list[ServiceUser]) -> None:
    """Atomic write with mode 0600 from the first byte (the temp file is 0600 too): the hashes are still secrets."""
    atomic_write_text(path, UsersDocument(users=users).model_dump_json(indent=2) + "\n", mode=0o600)


def add_user(path: Path, name: str, role: str, replace: bool = False) -> str:
    """Create (or, with replace, re-key) a user in the users file; returns its new token, which is not stored."""
    if not NAME_PATTERN.match(name):
        raise UsersFileError(
            f"user name {name!r} is not valid: 1-64 letters, digits, '.', '_', '@' or '-', starting with a "
            "letter or digit"
        )
    if role not in ROLES:
        raise UsersFileError(f"unknown role {role!r}; choose one of {', '.join(ROLES)}")
    with _editing(path):
        users = read_users_file(path)
        if any(u.name == name for u in users) and not replace:
            raise UsersFileError(
                f"user {name!r} already exists in {path}; pass --replace to give it a new token and role"
            )
        token = new_token()
        kept = [u for u in users if u.name != name]
        user = ServiceUser.model_validate({"name": name, "role": role, "token_sha256": hash_token(token)})
        write_users_file(path, [*kept, user])
    return token


def remove_user(path: Path, name: str) -> None:
    with _editing(path):
        users = read_users_file(path)
        if not any(u.name == name for u in users):
            raise UsersFileError(f"no user {name!r} in {path}; `rlloop serve users list` shows them")
        write_users_file(path, [u for u in users if u.name != name])


def _editing(path: Path) -> contextlib.AbstractContextManager[None]:
    """The users file's lock: two `users add` at once each keep their user (read, change, write under it)."""
    return once.exclusive(path.with_name(f".{path.name}.lock"))


def is_loopback(host: str) -> bool:
    """True for localhost, 127.0.0.0/8 and ::1 (with or without brackets); False for 0.0.0.0, ::, names, LAN IPs."""
    host = host.strip().strip("[]").lower()
    if host == "localhost" or host.endswith(".localhost"):
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def check_bind(host: str, users: list[ServiceUser], users_file: Path) -> None:
    """Refuse to listen beyond loopback unless some admin can authenticate."""
    if is_loopback(host) or any(u.role == "admin" for u in users):
        return
    raise InsecureBindError(
        f"refusing to listen on {host}: the service would be reachable beyond this machine without "
        f"authentication. Create an admin first (`{ADD_HINT}`; users go to {users_file}, or set "
        f"{TOKENS_ENV}), then start it again; or listen on 127.0.0.1"
    )


class UserDirectory:
    """The users the service accepts: the file (re-read when it changes, so `users add` needs no restart) plus
    RLLOOP_SERVICE_TOKENS (read once). `required` is fixed at start: removing every user never opens the API."""

    def __init__(self, path: Path, required: bool = False) -> None:
        self.path = path
        self._env = env_users()
        self._lock = threading.Lock()
        self._stamp: tuple[int, int] | None = None
        self._file: list[ServiceUser] = read_users_file(path)
        self._stamp = self._file_stamp()
        self.required = required or bool(self.users())

    def _file_stamp(self) -> tuple[int, int] | None:
        try:
            stat = self.path.stat()
        except OSError:
            return None
        return (stat.st_mtime_ns, stat.st_size)

    def users(self) -> list[ServiceUser]:
        stamp = self._file_stamp()
        with self._lock:
            if stamp != self._stamp:
                try:
                    self._file = read_users_file(self.path)
                    self._stamp = stamp
                except UsersFileError:
                    pass  # a broken edit: keep the last good set rather than lock everyone out mid-flight
            return [*self._file, *self._env]

    def authenticate(self, token: str) -> ServiceUser | None:
        """The user whose token this is. Every stored hash is compared (constant time), so timing tells nothing."""
        digest = hash_token(token)
        found: ServiceUser | None = None
        for user in self.users():
            if hmac.compare_digest(digest, user.token_sha256) and found is None:
                found = user
        return found
