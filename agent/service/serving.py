"""Run the service with uvicorn (`rlloop serve`), signing in with the admin token or the users file."""

from __future__ import annotations

from agent.service.settings import ServiceSettings


def serve(settings: ServiceSettings, host: str = "127.0.0.1", port: int = 8765) -> None:
    """Run the service with uvicorn on host:port until Ctrl-C. Runs it started keep going unless
    `settings.stop_runs_on_shutdown`.

    Without users (and without `no_auth`) the service signs in with an admin token it makes on the first start and
    keeps in HOME/service_admin_token (0600); the sign-in link is printed on stdout. Raises auth.InsecureBindError when
    `host` is not loopback and no admin can authenticate (always with `no_auth`), auth.UsersFileError (and its
    TokenFileError) when the users or the token file cannot be used."""
    import uvicorn

    from agent.service.app import create_app as build
    from agent.service.auth import check_bind, sign_in_url, users_file_for

    users_path = users_file_for(settings.home, settings.users_file)
    if settings.no_auth:
        check_bind(host, [], users_path)  # an open service never listens beyond loopback
    app = build(settings)
    check_bind(host, app.state.users.users(), users_path)
    token: str | None = app.state.admin_token
    if token is not None:
        shown = "127.0.0.1" if host in ("0.0.0.0", "", "::") else host
        shown = f"[{shown}]" if ":" in shown and not shown.startswith("[") else shown
        print(f"rlloop service: sign in at {sign_in_url(f'http://{shown}:{port}', token)}", flush=True)
        print(
            f"rlloop service: the admin token is kept in {app.state.admin_token_file} (mode 0600; later starts "
            "reuse it: remove the file to make a new one); API callers send `Authorization: Bearer <token>`",
            flush=True,
        )
    uvicorn.run(app, host=host, port=port, log_level="info")
