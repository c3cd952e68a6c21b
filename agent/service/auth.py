"""Who may call the run service: users with bearer tokens and roles, stored as sha256 hashes.

Users live in a JSON file (default `RLLOOP_HOME/service_users.json`, mode 0600, written atomically) and/or in the
environment variable `RLLOOP_SERVICE_TOKENS` (the same JSON). Only hashes are stored: a token is shown once, when
`rlloop serve users add` creates it. Tokens are 256 random bits, so a plain sha256 is enough (no KDF needed), and
they are compared in constant time.

Signed in by default: a service started without any user and without `--no-auth` makes one admin token (like Jupyter)
and keeps it, in clear, in `RLLOOP_HOME/service_admin_token` (mode 0600, owned by the service's user, written
atomically, never read through a symlink); later starts reuse it. An open service is the explicit `--no-auth`.
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
import stat
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
ADMIN_TOKEN_FILE_NAME = "service_admin_token"
ADMIN_TOKEN_USER = "admin"
TOKEN_PATTERN = re.compile(r"^rll_[A-Za-z0-9_-]{20,200}$")


class UsersFileError(ValueError):
    """The users file or RLLOOP_SERVICE_TOKENS cannot be read, or a users command got bad input."""


class TokenFileError(UsersFileError):
    """The admin token file is unsafe (a symlink, not ours, readable by others) or cannot be read or written."""


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


def admin_token_file_for(home: Path) -> Path:
    return home / ADMIN_TOKEN_FILE_NAME


def sign_in_url(base_url: str, token: str) -> str:
    """The page's sign-in link. The token rides in the fragment: a browser never sends it to the server, so it stays
    out of access logs and Referer headers; the page stores it and drops it from the address bar."""
    return f"{base_url.rstrip('/')}/#token={token}"


def read_admin_token(path: Path) -> str | None:
    """The admin token in `path`; None when there is none. Refuses (TokenFileError) a symlink, anything but a regular
    file of this user with no group or other permission bits, and content that is not one token."""
    fix = f"fix it (`chmod 600 {path}`), or remove it and start the service again to make a new token"
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as exc:
        if path.is_symlink():
            raise TokenFileError(
                f"the admin token file {path} is a symlink; it is never followed: remove it and start again"
            ) from None
        raise TokenFileError(f"cannot read the admin token file {path} ({exc.strerror}); {fix}") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise TokenFileError(
                f"the admin token file {path} is not a regular file; remove it and start again"
            )
        if info.st_uid != os.getuid():
            raise TokenFileError(
                f"the admin token file {path} belongs to uid {info.st_uid}, not to this user ({os.getuid()}); "
                "remove it and start again"
            )
        if info.st_mode & 0o077:
            raise TokenFileError(
                f"the admin token file {path} has mode {stat.S_IMODE(info.st_mode):04o}: others may read the "
                f"admin token. It must be 0600; {fix}"
            )
        try:
            text = handle.read(4096).decode("ascii").strip()
        except (OSError, UnicodeDecodeError) as exc:
            raise TokenFileError(f"cannot read the admin token file {path} ({exc}); {fix}") from None
    if not TOKEN_PATTERN.match(text):
        raise TokenFileError(
            f"the admin token file {path} does not hold one token (rll_ and letters); remove it and start the "
            "service again to make a new token"
        )
    return text


def ensure_admin_token(path: Path) -> tuple[str, bool]:
    """(token, created): the admin token in `path`, made (0600, atomically) when there is none. Under a lock, so two
    services starting on one home agree on one token."""
    with once.exclusive(path.with_name(f".{path.name}.lock")):
        found = read_admin_token(path)
        if found is not None:
            return found, False
        token = new_token()
        try:
            atomic_write_text(path, token + "\n", mode=0o600)  # a symlink at `path` is replaced, not followed
        except OSError as exc:
            raise TokenFileError(f"cannot write the admin token file {path} ({exc.strerror})") from None
        return token, True


def admin_token_user(token: str) -> ServiceUser:
    return ServiceUser(name=ADMIN_TOKEN_USER, role="admin", token_sha256=hash_token(token))


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
    """Refuse to listen beyond loopback unless some admin can authenticate (a user or the admin token)."""
    if is_loopback(host) or any(u.role == "admin" for u in users):
        return
    raise InsecureBindError(
        f"refusing to listen on {host}: the service would be reachable beyond this machine without "
        f"authentication. Start it without --no-auth (it then makes an admin token), or create an admin "
        f"(`{ADD_HINT}`; users go to {users_file}, or set {TOKENS_ENV}); or listen on 127.0.0.1"
    )


class UserDirectory:
    """The users the service accepts: the file (re-read when it changes, so `users add` needs no restart) plus
    RLLOOP_SERVICE_TOKENS (read once) plus `extra` (the admin token file's user). `required` is fixed at start: removing every user never opens the API."""

    def __init__(self, path: Path, required: bool = False, extra: list[ServiceUser] | None = None) -> None:
        self.path = path
        self._env = [*env_users(), *(extra or [])]
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
