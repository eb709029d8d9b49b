"""What a request works with: the process's one session (in
``app.extensions``) and, per request on ``g``, the DuckDB connections it
reads through (flaskr's ``get_db`` pattern)."""

from __future__ import annotations

import threading

from flask import current_app, g

from frlake.catalog.store import Catalog
from frlake.server.config import ServerConfig
from frlake.session import Frlake


def config() -> ServerConfig:
    return current_app.config["FRLAKE"]


def session() -> Frlake:
    return current_app.extensions["frlake"]


def catalog() -> Catalog:
    return session().catalog


def upload_budget():
    return current_app.extensions["frlake_upload_budget"]


# Building the views costs a catalog read per table; a request should cost a
# query. So each server thread keeps its connection and rebuilds it only when
# the catalog changed (new lake files or diagnoses); a request takes it on g.
_local = threading.local()


def catalog_version() -> tuple:
    """The catalog's version (:meth:`Catalog.version`), read once per request."""
    if "catalog_version" not in g:
        g.catalog_version = catalog().version()
    return g.catalog_version


def lake():
    """A trusted DuckDB connection with the lake's views, for frlake's own queries."""
    if "lake" not in g:
        version = catalog_version()
        cached = getattr(_local, "lake", None)
        if cached is None or cached[0] != version:
            if cached is not None:
                cached[1].close()
            from frlake.query.connect import connect

            cached = (version, connect(catalog(), session().lake))
            _local.lake = cached
        g.lake = cached[1]
    return g.lake


def sandbox():
    """The ``Sandbox`` for users' SQL, one per server thread, rebuilt when the
    catalog changed or when a query changed its views (it then closes itself).
    Each query runs on its own cursor, so nothing a query leaves behind
    reaches the next user of the thread."""
    if "sandbox" not in g or g.sandbox.closed:
        limits = config().query_limits
        version = (catalog_version(), limits)
        cached = getattr(_local, "sandbox", None)
        if cached is None or cached[0] != version or cached[1].closed:
            if cached is not None and not cached[1].closed:
                cached[1].close()
            cached = (version, session().sandbox(limits))
            _local.sandbox = cached
        g.sandbox = cached[1]
    return g.sandbox


def teardown(_exc: BaseException | None) -> None:
    """The connections stay with their thread; the request lets go of them."""
    g.pop("lake", None)
    g.pop("sandbox", None)


# Facet counts cost three catalog queries over every matching attempt; the
# same filters on an unchanged catalog give the same counts, so the app keeps
# them (a few hundred filter sets) until the catalog changes.
_facets_lock = threading.Lock()


def attempt_facets(**filters) -> dict:
    cache = current_app.extensions.setdefault("frlake_facets", {})
    key = (catalog_version(), tuple(sorted(filters.items())))
    with _facets_lock:
        if key in cache:
            return cache[key]
    counts = catalog().attempt_facets(**filters)
    with _facets_lock:
        if len(cache) >= 256:
            cache.clear()
        cache[key] = counts
    return counts
