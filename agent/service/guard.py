"""The service's one authorization check, applied to every route as an app-wide dependency.

What a route needs follows from its method unless listed in ROUTE_ROLES: GET/HEAD need a viewer, anything else an
admin. A new route is therefore admin-only until someone decides otherwise; only OPEN_PATHS need no token.
Only with `--no-auth` (loopback only, see `auth.check_bind`) does every request pass, and even then cross-origin writes
and requests addressed to a non-loopback Host (DNS rebinding) are refused. By default the service has users, or the
admin token it made (`auth.ensure_admin_token`), and a missing token gets 401 saying where that token is kept.
"""

from __future__ import annotations

from typing import Annotated
from urllib.parse import urlsplit

from fastapi import Depends, HTTPException, Request, status
from fastapi.security import HTTPAuthorizationCredentials, HTTPBearer
from pydantic import BaseModel

from agent.service.auth import ADMIN_TOKEN_FILE_NAME, ROLE_RANK, ROLES, Role, UserDirectory, is_loopback

OPEN_PATHS = frozenset({"/", "/health", "/ui.js", "/ui.css"})
# Routes that answer a browser's navigation with a page (static HTML, no data: its script fetches the data with the
# tab's token) and API clients with JSON, which needs a token as usual.
PAGE_ROUTES = frozenset({"/runs/{run_id}", "/runs/{run_id}/trials/{trial_id}"})
SAFE_METHODS = frozenset({"GET", "HEAD", "OPTIONS"})
ROUTE_ROLES: dict[tuple[str, str], Role] = {("POST", "/approvals/{run_id}/{trial_id}"): "approver"}
REALM = 'Bearer realm="rlloop"'

bearer = HTTPBearer(
    auto_error=False,
    description="A token from `rlloop serve users add NAME --role viewer|approver|admin`.",
)


class Principal(BaseModel):
    """Who makes the request. `authenticated` is False when the service runs open (--no-auth, loopback)."""

    name: str | None
    role: Role
    authenticated: bool


def required_role(method: str, path: str) -> Role | None:
    """The least role a request needs (None: open to anyone). `path` is the route's template, e.g. /runs/{run_id}."""
    if path in OPEN_PATHS:
        return None
    found = ROUTE_ROLES.get((method.upper(), path))
    if found is not None:
        return found
    return "viewer" if method.upper() in SAFE_METHODS else "admin"


def wants_page(request: Request) -> bool:
    """A browser opening the URL (it asks for HTML, not JSON): it gets the page, never the data."""
    accept = request.headers.get("accept", "").lower()
    return (
        request.method.upper() in ("GET", "HEAD")
        and "text/html" in accept
        and "application/json" not in accept
    )


def _roles_from(role: Role) -> str:
    return " or ".join(ROLES[ROLE_RANK[role] :])


def _refuse_cross_origin(request: Request) -> None:
    """A browser names the page that sent a write in Origin; only this service's own page may write."""
    origin = request.headers.get("origin")
    if origin is None:
        return
    if urlsplit(origin).netloc.lower() != request.headers.get("host", "").lower():
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"cross-origin request from {origin} refused: use this service's own page or a non-browser client",
        )


def _sign_in_hint(request: Request) -> str:
    """Where the admin token is, for the 401, said without the machine's paths (the caller is nobody yet): whoever
    started the service was shown the file's path and the sign-in link."""
    if getattr(request.app.state, "admin_token_file", None) is None:
        return ""
    return (
        f"; or sign in with the admin token, kept in the service's RLLOOP_HOME as {ADMIN_TOKEN_FILE_NAME} (the "
        "service printed its path and the sign-in link at start: open this service's page at /#token=<the token>)"
    )


def authorize(
    request: Request,
    credentials: Annotated[HTTPAuthorizationCredentials | None, Depends(bearer)],
) -> Principal:
    """The app-wide dependency: checks the request's bearer token against the route's required role.

    The accepted users are `request.app.state.users` (a UserDirectory, set by create_app)."""
    directory: UserDirectory = request.app.state.users
    route = request.scope.get("route")
    path = getattr(route, "path", request.url.path)
    needed = None if path in PAGE_ROUTES and wants_page(request) else required_role(request.method, path)
    if request.method.upper() not in SAFE_METHODS:
        _refuse_cross_origin(request)
    if not directory.required:
        host = urlsplit(f"//{request.headers.get('host', '')}").hostname or ""
        if not is_loopback(host):
            raise HTTPException(
                status.HTTP_403_FORBIDDEN,
                f"this service runs open (--no-auth), so it only answers requests addressed to loopback (Host was "
                f"{host!r}); start it without --no-auth, or create an admin with "
                "`rlloop serve users add NAME --role admin`",
            )
        return Principal(name=None, role="admin", authenticated=False)
    user = directory.authenticate(credentials.credentials) if credentials else None
    if needed is None:
        return Principal(
            name=user.name if user else None,
            role=user.role if user else "viewer",
            authenticated=user is not None,
        )
    what = f"{request.method} {path} needs a bearer token of role {_roles_from(needed)}"
    if credentials is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"{what}: send `Authorization: Bearer <token>` (create one with "
            f"`rlloop serve users add NAME --role {needed}`){_sign_in_hint(request)}",
            headers={"WWW-Authenticate": REALM},
        )
    if user is None:
        raise HTTPException(
            status.HTTP_401_UNAUTHORIZED,
            f"{what}: the token given is not valid (unknown or removed); ask an admin for a new one",
            headers={"WWW-Authenticate": f'{REALM}, error="invalid_token"'},
        )
    if ROLE_RANK[user.role] < ROLE_RANK[needed]:
        raise HTTPException(
            status.HTTP_403_FORBIDDEN,
            f"{what}; {user.name} has role {user.role}",
        )
    return Principal(name=user.name, role=user.role, authenticated=True)


Caller = Annotated[Principal, Depends(authorize)]
