"""The web service: ``create_app(config)`` with the ``ui`` and ``api`` blueprints."""

from __future__ import annotations

import re
import tempfile
import threading
from datetime import UTC, datetime
from urllib.parse import urlencode

from flask import Flask, Request, current_app
from flask.json.provider import DefaultJSONProvider
from markupsafe import Markup, escape

from frlake.server.config import ServerConfig
from frlake.session import Frlake
from frlake.values import Record, plain


class _JSON(DefaultJSONProvider):
    sort_keys = False

    @staticmethod
    def default(o):
        if isinstance(o, Record):
            return o.to_dict()
        value = plain(o)
        return DefaultJSONProvider.default(o) if value is o else value


def _when(value) -> str:
    """A time as the pages show it, always with its zone: nanoseconds since the
    epoch, a datetime (without a zone: UTC) or an ISO 8601 text."""
    if value is None or value == "":
        return ""
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value)
        except ValueError:
            return value
    if isinstance(value, (int, float)):
        value = datetime.fromtimestamp(value / 1e9, tz=UTC)
    if value.tzinfo is None:
        value = value.replace(tzinfo=UTC)
    value = value.astimezone(UTC)
    return value.strftime("%Y-%m-%d %H:%M:%S UTC")


_NAME = re.compile(r"[\w.]+(?:-[\w.]+)+")  # gpu-b03, job-20d6d4, 2026-11-29


def _names(text) -> Markup:
    """A text whose hyphenated names never break across lines (a line breaks after a hyphen by default):
    "rank 2 on gpu-b04" wraps between words only. Copying it gives the same characters."""
    return Markup(_NAME.sub(lambda m: f'<span class="name">{m.group(0)}</span>', str(escape(text or ""))))


def _with_page(args, page: int) -> str:
    query = {k: v for k, v in args.items() if k != "page" and v}
    query["page"] = page
    return urlencode(query)


def _with_args(args, **changes) -> str:
    """This page's query string with some arguments changed (None removes one); back to page 1."""
    query = {k: v for k, v in args.items() if v and k not in ("page", "_format", "_table")}
    for k, v in changes.items():
        if v is None:
            query.pop(k, None)
        else:
            query[k] = v
    return "?" + urlencode(query)


class _Request(Request):
    def _get_file_stream(self, total_content_length, content_type, filename=None, content_length=None):
        """Uploaded parts go to anonymous files on the lake's filesystem
        (werkzeug would keep small ones in memory and put the rest in /tmp)."""
        return tempfile.TemporaryFile("wb+", dir=current_app.extensions["frlake_upload_dir"])


def create_app(config: ServerConfig) -> Flask:
    from frlake.ingest.upload import UPLOADS_DIR, DiskBudget, remove_stale_uploads
    from frlake.server import api, context, errors, metrics, params, security, ui

    app = Flask(__name__)
    app.request_class = _Request
    app.json = _JSON(app)
    app.config["FRLAKE"] = config
    app.config["MAX_CONTENT_LENGTH"] = config.max_upload_bytes
    # The process's one session; the catalog is created (or checked) once, at start-up.
    session = app.extensions["frlake"] = Frlake(config.settings)
    session.catalog_version()  # opens the catalog now: a stale one stops the server before it listens
    uploads = session.lake.root / UPLOADS_DIR
    uploads.mkdir(parents=True, exist_ok=True)
    remove_stale_uploads(session.lake.root)
    app.extensions["frlake_upload_dir"] = str(uploads)
    app.extensions["frlake_upload_budget"] = DiskBudget(config.upload_limits.budget_bytes)
    app.extensions["frlake_query_slots"] = threading.BoundedSemaphore(config.max_queries)
    metrics.register(app)  # first: every request is counted, the refused ones too
    security.register(app)
    params.register(app)  # after the security checks: a foreign request learns nothing of the parameters
    app.register_blueprint(api.bp, url_prefix="/api")
    app.register_blueprint(ui.bp)
    errors.register(app)
    app.teardown_appcontext(context.teardown)
    from frlake.diagnose.words import (
        detail_text,
        hosts_text,
        ranks_on_hosts,
        ranks_text,
        role_text,
        split_stack,
        stack_label,
        waiting_text,
        weaker_text,
    )
    from frlake.values import percent_text, score_text

    app.add_template_filter(_when, "ns_time")
    app.add_template_filter(_when, "when")
    app.add_template_filter(role_text, "role_text")
    app.add_template_filter(waiting_text, "waiting_text")
    app.add_template_filter(ranks_on_hosts, "ranks_on_hosts")
    app.add_template_filter(ranks_text, "ranks_text")
    app.add_template_filter(score_text, "score")  # numbers as frlake.values shows them to people, as the CLI does
    app.add_template_filter(percent_text, "percent")
    app.add_template_filter(hosts_text, "hosts_text")
    app.add_template_filter(detail_text, "detail_text")
    app.add_template_filter(weaker_text, "weaker_text")
    app.add_template_filter(stack_label, "stack_label")
    app.add_template_filter(split_stack, "split_stack")
    app.add_template_filter(_names, "names")
    app.add_template_filter(_with_page, "with_page")
    app.add_template_filter(_with_args, "with_args")
    from frlake.query.window import QUICK_RANGES

    app.jinja_env.globals["quick_ranges"] = QUICK_RANGES
    alerts = None
    if config.notify is not None:
        from frlake.server.alerts import Alerts

        alerts = app.extensions["frlake_alerts"] = Alerts(
            session, config.notify, on_delivered=lambda body: metrics.alert_delivered(app, body)).start()
    if config.watch is not None:
        from frlake.server.watch import Watcher

        app.extensions["frlake_watch"] = Watcher(session, config.watch, after_scan=alerts.wake if alerts else None,
                                                 on_look=lambda look: metrics.watch_looked(app, look)).start()

    return app
