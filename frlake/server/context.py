"""What a request works with: the process's one session (in
``app.extensions``) and, per request on ``g``, the DuckDB connections it
reads through (flaskr's ``get_db`` pattern)."""

from __future__ import annotations

from flask import current_app, g

from frlake.server.config import ServerConfig
from frlake.session import Frlake


def config() -> ServerConfig:
    return current_app.config["FRLAKE"]


def session() -> Frlake:
    return current_app.extensions["frlake"]


def upload_budget():
    return current_app.extensions["frlake_upload_budget"]


def catalog_version() -> tuple:
    """The catalog's version (:meth:`Frlake.catalog_version`), read once per request."""
    if "catalog_version" not in g:
        g.catalog_version = session().catalog_version()
    return g.catalog_version


def memoized(name: str, args: tuple, compute):
    """``compute()``, or what it gave for the same ``name`` and ``args`` at this catalog version: what a page
    shows of one attempt (its diagnosis, progress, arrivals) changes only when the catalog does, and an
    incident's page is opened by many people at once (the session's cache, shared by the app's threads)."""
    return session().memoized(name, args, compute, catalog_version())


def views():
    """This thread's trusted DuckDB connection with the lake's views, for frlake's own queries: the
    session keeps it per thread until the catalog changes (building the views costs a catalog read per
    table; a request should cost a query)."""
    if "views" not in g:
        g.views = session().views(catalog_version())
    return g.views


def sandbox():
    """The ``Sandbox`` for users' SQL: this server thread's, kept by the session until the catalog changed
    or a query changed its views."""
    if "sandbox" not in g or g.sandbox.closed:
        g.sandbox = session().thread_sandbox(config().query_limits, catalog_version())
    return g.sandbox


def teardown(_exc: BaseException | None) -> None:
    """The connections stay with their thread; the request lets go of them."""
    g.pop("views", None)
    g.pop("sandbox", None)


def attempt_facets(**filters) -> dict:
    """The facet counts: three catalog queries over every matching attempt, so the same filters on an
    unchanged catalog give the counts computed before."""
    return memoized("facets", tuple(sorted(filters.items())), lambda: session().attempt_facets(**filters))
