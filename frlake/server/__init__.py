"""The web service: ``create_app(config)`` with the ``ui`` and ``api`` blueprints."""

from __future__ import annotations

import threading
from datetime import datetime, timezone
from urllib.parse import urlencode

import tempfile
from pathlib import Path

from flask import Flask, Request, current_app
from flask.json.provider import DefaultJSONProvider

from frlake.catalog.store import Catalog
from frlake.server.config import ServerConfig
from frlake.values import plain


class _JSON(DefaultJSONProvider):
    sort_keys = False

    @staticmethod
    def default(o):
        value = plain(o)
        return DefaultJSONProvider.default(o) if value is o else value


def _ns_time(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _with_page(args, page: int) -> str:
    query = {k: v for k, v in args.items() if k != "page" and v}
    query["page"] = page
    return urlencode(query)


class _Request(Request):
    def _get_file_stream(self, total_content_length, content_type, filename=None, content_length=None):
        """Uploaded parts go to anonymous files on the lake's filesystem
        (werkzeug would keep small ones in memory and put the rest in /tmp)."""
        return tempfile.TemporaryFile("wb+", dir=current_app.extensions["frlake_upload_dir"])


def create_app(config: ServerConfig) -> Flask:
    from frlake.ingest.upload import UPLOADS_DIR, DiskBudget, remove_stale_uploads
    from frlake.server import api, errors, security, ui

    app = Flask(__name__)
    app.request_class = _Request
    app.json = _JSON(app)
    app.config["FRLAKE"] = config
    app.config["MAX_CONTENT_LENGTH"] = config.max_upload_bytes
    # The catalog is created (or checked) once, at start-up.
    app.extensions["frlake_catalog"] = Catalog(config.settings.db_url)
    uploads = Path(config.settings.lake) / UPLOADS_DIR
    uploads.mkdir(parents=True, exist_ok=True)
    remove_stale_uploads(config.settings)
    app.extensions["frlake_upload_dir"] = str(uploads)
    app.extensions["frlake_upload_budget"] = DiskBudget(config.upload_limits.budget_bytes)
    security.register(app)
    app.register_blueprint(api.bp, url_prefix="/api")
    app.register_blueprint(ui.bp)
    errors.register(app)
    app.add_template_filter(_ns_time, "ns_time")
    app.add_template_filter(_with_page, "with_page")

    return app


def config() -> ServerConfig:
    return current_app.config["FRLAKE"]


def catalog() -> Catalog:
    return current_app.extensions["frlake_catalog"]


def upload_budget():
    return current_app.extensions["frlake_upload_budget"]


_local = threading.local()


def lake():
    """A DuckDB connection with the lake's views, for frlake's own queries.
    Each server thread keeps its own and rebuilds it only when the catalog
    changed (new lake files or diagnoses), so a request costs a query, not a
    rebuild of the views."""
    from frlake.query import connect

    s = config().settings
    version = (s, catalog().version())
    cached = getattr(_local, "lake", None)
    if cached is None or cached[0] != version:
        if cached is not None:
            cached[1].close()
        cached = (version, connect(s.lake, s.db_url))
        _local.lake = cached
    return cached[1]


def sandbox():
    """The ``Sandbox`` for users' SQL, one per server thread, rebuilt when the
    catalog changed or when a query changed its views (it then closes itself).
    Each query runs on its own cursor, so nothing a query leaves behind
    reaches the next user of the thread."""
    from frlake.query import open_sandbox

    s = config().settings
    version = (s, catalog().version(), config().query_limits)
    cached = getattr(_local, "sandbox", None)
    if cached is None or cached[0] != version or cached[1].closed:
        if cached is not None and not cached[1].closed:
            cached[1].close()
        cached = (version, open_sandbox(s.lake, s.db_url, config().query_limits))
        _local.sandbox = cached
    return cached[1]
