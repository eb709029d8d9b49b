"""What a request works with: the process's one session (in
``app.extensions``) and, per request on ``g``, the DuckDB connections it
reads through (flaskr's ``get_db`` pattern)."""

from __future__ import annotations

import threading
from collections import OrderedDict

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


# What a page shows of one attempt (its diagnosis, progress, arrivals) changes only when the catalog does:
# each is computed once per catalog version and kept in a small LRU for every thread (an incident's page
# is opened by many people at once). The values are shared: callers never change them.
MEMO_ENTRIES = 128
_memo: OrderedDict = OrderedDict()
_memo_lock = threading.Lock()


def memoized(name: str, args: tuple, compute):
    """``compute()``, or what it gave for the same ``name`` and ``args`` at this catalog version."""
    key = (catalog_version(), name, args)
    with _memo_lock:
        if key in _memo:
            _memo.move_to_end(key)
            return _memo[key]
    value = compute()
    with _memo_lock:
        _memo[key] = value
        while len(_memo) > MEMO_ENTRIES:
            _memo.popitem(last=False)
    return value


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
