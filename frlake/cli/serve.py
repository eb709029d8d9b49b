"""frlake serve: the web UI and JSON API, served by waitress."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import DbUrlOpt, LakeOpt, console, settings, user_errors


def serve_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port.")] = 8750,
    token: Annotated[str | None, typer.Option(envvar="FRLAKE_TOKEN", help="Token for uploads and SQL "
                                                                          "(required off loopback).")] = None,
    threads: Annotated[int, typer.Option(help="Request threads.", min=1)] = 8,
    max_upload_mb: Annotated[int, typer.Option(help="Largest upload, in MB (413 beyond).", min=1)] = 1024,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Serve the web UI and the JSON API (production WSGI server, not Flask's)."""
    import waitress

    from frlake.server import create_app
    from frlake.server.config import ServerConfig, check_binding

    with user_errors():
        check_binding(host, token)
        app = create_app(ServerConfig(settings(ctx, lake, db_url), token=token, max_upload_bytes=max_upload_mb << 20))
    console.print(f"frlake serving {app.config['FRLAKE'].settings.lake} on http://{host}:{port}/")
    waitress.serve(app, host=host, port=port, threads=threads, max_request_body_size=(max_upload_mb << 20) + (1 << 20),
                   ident="frlake")
