"""The `rlloop serve` command group, ready to mount on the main Typer app: `app.add_typer(serve_app, name="serve")`.

`rlloop serve [OPTIONS]` runs the service; `rlloop serve users add|list|remove` manages who may call it.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Annotated

import typer

from agent.service.auth import (
    ADMIN_TOKEN_FILE_NAME,
    ROLES,
    InsecureBindError,
    UsersFileError,
    add_user,
    env_users,
    read_users_file,
    remove_user,
    users_file_for,
)

serve_app = typer.Typer(
    invoke_without_command=True,
    no_args_is_help=False,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Serve the run API and the approvals page; `users` manages who may call it.",
)
users_app = typer.Typer(no_args_is_help=True, help="Users of the service and their bearer tokens.")
serve_app.add_typer(users_app, name="users")

HomeOption = Annotated[Path | None, typer.Option(help="RLLOOP_HOME (default $RLLOOP_HOME or ./.rlloop).")]
UsersFileOption = Annotated[
    Path | None, typer.Option(help="The users file (default HOME/service_users.json).")
]


def _home(home: Path | None) -> Path:
    return home or Path(os.environ.get("RLLOOP_HOME", ".rlloop"))


def _fail(message: str) -> typer.Exit:
    typer.echo(f"error: {message}", err=True)
    return typer.Exit(2)


@serve_app.callback()
def serve_command(
    ctx: typer.Context,
    host: Annotated[
        str, typer.Option(help="Interface to listen on; beyond loopback needs a token (never --no-auth).")
    ] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on.")] = 8765,
    home: HomeOption = None,
    max_concurrent_runs: Annotated[int, typer.Option(min=1, help="Runs at once; more wait as queued.")] = 2,
    mlflow_ui_url: Annotated[
        str, typer.Option(help="Base URL of the MLflow UI, for links.")
    ] = "http://127.0.0.1:5000",
    stop_runs_on_shutdown: Annotated[
        bool,
        typer.Option(help="SIGTERM running workers when the service stops (default: they keep running)."),
    ] = False,
    users_file: UsersFileOption = None,
    no_auth: Annotated[
        bool,
        typer.Option(
            "--no-auth",
            help="Open service, loopback only: no tokens, anyone on this machine may start runs and approve. By "
            "default a service without users makes an admin token (HOME/service_admin_token, 0600) and prints "
            "its sign-in link.",
        ),
    ] = False,
) -> None:
    """Serve the run API and the approvals page (http://HOST:PORT/, API docs at /docs)."""
    if ctx.invoked_subcommand is not None:
        return
    from agent.service.serving import serve
    from agent.service.settings import ServiceSettings

    settings = ServiceSettings(
        home=_home(home),
        max_concurrent_runs=max_concurrent_runs,
        mlflow_ui_url=mlflow_ui_url,
        stop_runs_on_shutdown=stop_runs_on_shutdown,
        users_file=users_file,
        no_auth=no_auth,
    )
    try:
        serve(settings, host, port)
    except (InsecureBindError, UsersFileError) as exc:
        raise _fail(str(exc)) from None


@users_app.command("add")
def users_add(
    name: Annotated[str, typer.Argument(help="The user's name, recorded on every decision it makes.")],
    role: Annotated[
        str, typer.Option(help=f"One of {', '.join(ROLES)}: read only; + decide on proposals; everything.")
    ] = "viewer",
    replace: Annotated[bool, typer.Option(help="Give an existing user a new token (and role).")] = False,
    home: HomeOption = None,
    users_file: UsersFileOption = None,
) -> None:
    """Create a user and print its token once (on stdout, alone; only its sha256 is stored)."""
    path = users_file_for(_home(home), users_file)
    try:
        token = add_user(path, name, role, replace=replace)
    except UsersFileError as exc:
        raise _fail(str(exc)) from None
    typer.echo(token)
    typer.echo(
        f"created {name} ({role}) in {path}. The token above is shown once; keep it secret. Call the API with "
        "`Authorization: Bearer <token>`, or paste it into the page's sign-in box. A running service picks "
        "new users up without a restart.",
        err=True,
    )


@users_app.command("list")
def users_list(home: HomeOption = None, users_file: UsersFileOption = None) -> None:
    """Who may call the service (tokens are not stored, so none is shown)."""
    path = users_file_for(_home(home), users_file)
    try:
        found = [(u, str(path)) for u in read_users_file(path)] + [
            (u, "RLLOOP_SERVICE_TOKENS") for u in env_users()
        ]
    except UsersFileError as exc:
        raise _fail(str(exc)) from None
    if not found:
        typer.echo(
            f"no users in {path}: the service signs in with the admin token it keeps in "
            f"{_home(home) / ADMIN_TOKEN_FILE_NAME} (made on its first start), or runs open with --no-auth",
            err=True,
        )
        return
    for user, source in found:
        typer.echo(f"{user.name}\t{user.role}\t{user.created_at}\t{source}")


@users_app.command("remove")
def users_remove(
    name: Annotated[str, typer.Argument(help="The user to remove; its token stops working at once.")],
    home: HomeOption = None,
    users_file: UsersFileOption = None,
) -> None:
    """Remove a user from the users file (a running service stops accepting its token)."""
    path = users_file_for(_home(home), users_file)
    try:
        remove_user(path, name)
    except UsersFileError as exc:
        raise _fail(str(exc)) from None
    typer.echo(f"removed {name} from {path}", err=True)


def main() -> None:
    serve_app()
