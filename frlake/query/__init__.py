"""SQL over the lake: ``connect(lake)`` for Python, ``query(...)`` for untrusted SQL."""

from __future__ import annotations

from pathlib import Path
from typing import Iterable

import duckdb

from frlake.catalog.store import Catalog
from frlake.config import Settings
from frlake.lake import Lake
from frlake.query.sandbox import QueryLimits, QueryResult, lock_down, run_limited
from frlake.query.views import create_views


def connect(lake: str | Path | None = None, db_url: str | None = None, *, read_only: bool = False,
            catalog_views: Iterable[str] | None = None,
            partition: tuple[str, int] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per lake table and catalog table.

    With ``read_only=True`` the connection is locked down as for untrusted SQL
    (no file access outside the lake's tables, no extensions). Internal
    callers name the ``catalog_views`` they need, so a catalog that lists
    millions of files is not copied into DuckDB for a diagnosis, and a
    ``partition`` (job, attempt) to see only its files, so a diagnosis costs
    the same however long the history is."""
    settings = Settings.resolve(lake, db_url)
    catalog = Catalog(settings.db_url)
    try:
        con = duckdb.connect(":memory:", config={"threads": 2})
        lake_obj = Lake(settings.lake)
        create_views(con, lake_obj, catalog, catalog_views, partition)
        con.execute("SET parquet_metadata_cache = true")  # Parquet footers read once per connection
    finally:
        catalog.close()
    if read_only:
        lock_down(con, [str(lake_obj.tables)])
    return con


def query(sql: str, settings: Settings, limits: QueryLimits = QueryLimits()) -> QueryResult:
    """Run one untrusted read-only statement over the views."""
    con = connect(settings.lake, settings.db_url, read_only=True)
    try:
        return run_limited(con, sql, limits)
    finally:
        con.close()


__all__ = ["QueryLimits", "QueryResult", "connect", "query"]
