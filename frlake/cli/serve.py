"""frlake serve: the web UI and JSON API, served by waitress."""

from __future__ import annotations

from typing import Annotated

import typer

from frlake.cli._common import (
    ConfigOpt,
    DbUrlOpt,
    LakeOpt,
    NotifyJobsOpt,
    NotifyOnOpt,
    NotifyOpt,
    NotifySecretOpt,
    PublicUrlOpt,
    console,
    notify_settings,
    parse_duration,
    settings,
    user_errors,
)
from frlake.errors import FrlakeError


def serve_command(
    ctx: typer.Context,
    host: Annotated[str, typer.Option(help="Address to listen on.")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port (1-65535).", min=1, max=65535)] = 8750,
    token: Annotated[str | None, typer.Option(envvar="FRLAKE_TOKEN", help="Token for uploads and SQL "
                                                                          "(required off loopback).")] = None,
    public_host: Annotated[list[str] | None, typer.Option(
        help="A host name clients use to reach the server (repeatable); requests naming any other host than "
             "these, loopback and --host are refused (421).")] = None,
    threads: Annotated[int, typer.Option(help="Request threads.", min=1)] = 8,
    max_queries: Annotated[int, typer.Option(
        help="Users' SQL queries run at once (each within its memory limit); the rest wait 2 s, then 429.",
        min=1)] = 2,
    max_upload_mb: Annotated[int, typer.Option(help="Largest upload, in MB (413 beyond).", min=1)] = 1024,
    upload_budget_mb: Annotated[int, typer.Option(
        help="Unpacked bytes all uploads may hold on disk at once, in MB (503 beyond).", min=1)] = 16384,
    watch: Annotated[list[str] | None, typer.Option(
        help="A folder to ingest on an interval while serving (repeatable); its scans are shown on the jobs "
             "page and at /api/watch.")] = None,
    every: Annotated[str, typer.Option(help="How often --watch scans the whole tree (the safety net), e.g. 10m.")] = "10m",
    poll: Annotated[str, typer.Option(help="How often --watch looks at the folders' times for new dumps, "
                                           "e.g. 2s (local folders also wake it through inotify).")] = "2s",
    settle: Annotated[str, typer.Option(help="An attempt with ranks that have not dumped is diagnosed as "
                                             "complete once no new dump of it came for this long, e.g. 60s.")] = "60s",
    layout: Annotated[str | None, typer.Option(help="Path template for --watch (as ingest --layout).")] = None,
    workers: Annotated[int, typer.Option(help="Parser processes for --watch.", min=1)] = 1,
    notify: NotifyOpt = None,
    notify_on: NotifyOnOpt = None,
    notify_jobs: NotifyJobsOpt = None,
    notify_secret: NotifySecretOpt = None,
    public_url: PublicUrlOpt = None,
    config_file: ConfigOpt = None,
    lake: LakeOpt = None,
    db_url: DbUrlOpt = None,
) -> None:
    """Serve the web UI and the JSON API (production WSGI server, not Flask's).
    With --watch, the same process also ingests the watched folders: it
    looks at their times every --poll and reads what is new, scans the whole
    tree every --every, and diagnoses an attempt as complete once it settles
    (every rank dumped, or --settle without a new dump); its looks, scans,
    errors and next run are on the jobs page and at GET /api/watch. With --notify URL, new incidents
    are posted to URL as they are diagnosed (GET /api/notify shows the
    deliveries); GET /metrics serves Prometheus' text format."""
    from dataclasses import replace

    import waitress

    from frlake.ingest.identity import IdentityOptions
    from frlake.ingest.pipeline import IngestOptions
    from frlake.ingest.upload import UploadLimits
    from frlake.server import create_app
    from frlake.server.config import ServerConfig, allowed_hosts, check_binding
    from frlake.server.watch import watch_config

    with user_errors():
        check_binding(host, token)
        names = allowed_hosts(host, public_host or ())
        scan = IngestOptions(identity=IdentityOptions(layout=layout), workers=workers, isolate=True)
        config = ServerConfig(settings(ctx, lake, db_url), token=token, max_upload_bytes=max_upload_mb << 20,
                              max_queries=max_queries,
                              upload_limits=replace(UploadLimits(), budget_bytes=upload_budget_mb << 20),
                              allowed_hosts=names, port=port,
                              watch=watch_config(watch or (), parse_duration(every), scan,
                                                 poll_s=parse_duration(poll), settle_s=parse_duration(settle)),
                              notify=notify_settings(notify, notify_on, notify_jobs, notify_secret, public_url,
                                                     config_file))
        app = create_app(config)
    if names is None:
        console.print(f"frlake answers to any host name on {host}; give --public-host NAME to name the ones it serves")
    # waitress's own body limit sits above Flask's, so an upload over --max-upload-mb gets the API's JSON 413
    # (Flask reads the Content-Length first) and waitress's plain-text answer is only for bodies far beyond it.
    with user_errors():
        try:
            server = waitress.create_server(app, host=host, port=port, threads=threads, ident="frlake",
                                            max_request_body_size=2 * (max_upload_mb << 20) + (64 << 20))
        except OSError as exc:
            raise FrlakeError(_bind_error(host, port, exc)) from None
    console.print(f"frlake serving {config.settings.lake} on http://{host}:{port}/", markup=False)
    try:
        server.run()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


def _bind_error(host: str, port: int, exc: OSError) -> str:
    import errno

    if exc.errno == errno.EADDRINUSE:
        return f"cannot listen on {host}:{port}: address in use (another server holds the port; give --port)"
    if exc.errno == errno.EADDRNOTAVAIL:
        return f"cannot listen on {host}:{port}: this machine has no such address (give --host)"
    if exc.errno == errno.EACCES:
        return f"cannot listen on {host}:{port}: permission denied (ports below 1024 need privileges)"
    return f"cannot listen on {host}:{port}: {exc.strerror or exc}"
