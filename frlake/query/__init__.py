"""SQL over the lake: ``connect(lake)`` for Python, ``query(...)`` for untrusted SQL."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import duckdb

from frlake.catalog.store import Catalog
from frlake.config import Settings
from frlake.lake import Lake
from frlake.query.sandbox import QueryLimits, QueryResult, Sandbox, lock_down
from frlake.query.views import create_views


def connect(lake: str | Path | None = None, db_url: str | None = None, *, read_only: bool = False,
            catalog_views: Iterable[str] | None = None,
            partition: tuple[str, int] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per lake table and catalog table.

    With ``read_only=True`` the connection is locked down as for untrusted SQL
    (it opens no file, the lake's tables are read through Arrow datasets; no
    extensions; the default memory limit); ``open_sandbox`` adds a cursor per
    query and the other limits. Internal callers name the ``catalog_views``
    they need, so a catalog that lists millions of files is not copied into
    DuckDB for a diagnosis, and a ``partition`` (job, attempt) to see only its
    files, so a diagnosis costs the same however long the history is."""
    if read_only:
        return open_sandbox(lake, db_url).con
    con, _ = _open(lake, db_url, catalog_views, partition, sealed=False)
    return con


def open_sandbox(lake: str | Path | None = None, db_url: str | None = None,
                 limits: QueryLimits = QueryLimits()) -> Sandbox:
    """A ``Sandbox`` for untrusted SQL over every view (close it when done)."""
    con, sources = _open(lake, db_url, None, None, sealed=True)
    lock_down(con, limits)
    return Sandbox(con, sources, limits)


def _open(lake, db_url, catalog_views, partition, sealed: bool) -> tuple[duckdb.DuckDBPyConnection, dict]:
    settings = Settings.resolve(lake, db_url)
    catalog = Catalog(settings.db_url)
    try:
        con = duckdb.connect(":memory:", config={"threads": 2})
        sources = create_views(con, Lake(settings.lake), catalog, catalog_views, partition, sealed=sealed)
        con.execute("SET parquet_metadata_cache = true")  # Parquet footers read once per connection
    finally:
        catalog.close()
    return con, sources


def query(sql: str, settings: Settings, limits: QueryLimits = QueryLimits()) -> QueryResult:
    """Run one untrusted read-only statement over the views."""
    with open_sandbox(settings.lake, settings.db_url, limits) as sandbox:
        return sandbox.run(sql)


__all__ = ["QueryLimits", "QueryResult", "Sandbox", "connect", "open_sandbox", "query"]
