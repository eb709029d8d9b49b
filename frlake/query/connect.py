"""DuckDB connections with the views of docs/schema.md.

``connect(catalog, lake)`` is trusted SQL (frlake's own queries, Python
users); ``open_sandbox(catalog, lake, limits)`` is for untrusted SQL. Both
take the catalog and lake they read; :class:`frlake.Frlake` opens them."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb

from frlake.catalog.store import Catalog
from frlake.query.sandbox import QueryLimits, QueryResult, Sandbox, lock_down
from frlake.query.views import create_views
from frlake.storage.lake import Lake


def connect(catalog: Catalog, lake: Lake, *, catalog_views: Iterable[str] | None = None,
            partition: tuple[str, int] | None = None, files: Iterable | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per lake table and catalog table.

    Internal callers name the ``catalog_views`` they need, so a catalog that
    lists millions of files is not copied into DuckDB for a diagnosis, and a
    ``partition`` (job, attempt) to see only its files, so a diagnosis costs
    the same however long the history is; or the committed ``files`` to read (several attempts', for a
    batch of diagnoses: ``LakeFiles.committed_in``)."""
    con, _ = _open(catalog, lake, catalog_views, partition, sealed=False, files=files)
    return con


def open_sandbox(catalog: Catalog, lake: Lake, limits: QueryLimits = QueryLimits()) -> Sandbox:
    """A ``Sandbox`` for untrusted SQL over every view (close it when done):
    it opens no file (the lake's tables are read through Arrow datasets), has
    no extensions, a memory limit, and runs each query on its own cursor."""
    con, sources = _open(catalog, lake, None, None, sealed=True)
    lock_down(con, limits)
    return Sandbox(con, sources, limits)


def _open(catalog: Catalog, lake: Lake, catalog_views, partition, sealed: bool,
          files: Iterable | None = None) -> tuple[duckdb.DuckDBPyConnection, dict]:
    con = duckdb.connect(":memory:", config={"threads": 2})
    try:
        sources = create_views(con, lake, catalog, catalog_views, partition, sealed=sealed, files=files)
        con.execute("SET parquet_metadata_cache = true")  # Parquet footers read once per connection
    except BaseException:
        con.close()
        raise
    return con, sources


__all__ = ["QueryLimits", "QueryResult", "Sandbox", "connect", "open_sandbox"]
