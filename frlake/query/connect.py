"""DuckDB connections with the views of docs/schema.md.

``connect(catalog, lake)`` is trusted SQL (frlake's own queries, Python
users); ``open_sandbox(catalog, lake, limits)`` is for untrusted SQL. Both
take the catalog and lake they read; :class:`frlake.Frlake` opens them."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import duckdb

from frlake.query.names import CATALOG_VIEW_NAMES
from frlake.query.sandbox import QueryLimits, QueryResult, Sandbox, lock_down
from frlake.query.views import create_views
from frlake.schema import PARTITIONED

if TYPE_CHECKING:
    from frlake.catalog.store import Catalog
    from frlake.storage.lake import Lake


def connect(catalog: Catalog, lake: Lake, *, catalog_views: Iterable[str] | None = None,
            partition: tuple[str, int] | None = None, files: Iterable | None = None,
            lake_tables: Iterable[str] | None = None,
            derived: Iterable[str] | None = None) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with a view per lake table and catalog table.

    Internal callers name the ``catalog_views`` they need, so a catalog that
    lists millions of files is not copied into DuckDB for a diagnosis, and a
    ``partition`` (job, attempt) to see only its files, so a diagnosis costs
    the same however long the history is; or the committed ``files`` to read (several attempts', for a
    batch of diagnoses: ``LakeFiles.committed_in``); and the ``lake_tables`` it reads (a fleet report: one
    or none), so that the other tables' files are not listed; and the ``derived`` views it reads (None:
    every one)."""
    con, _ = _open(catalog, lake, catalog_views, partition, sealed=False, files=files, lake_tables=lake_tables,
                   derived=derived)
    return con


def open_sandbox(catalog: Catalog | None, lake: Lake, limits: QueryLimits = QueryLimits(),
                 partition: tuple[str, int] | None = None, views: Iterable[str] | None = None, *,
                 single_use: bool = False) -> Sandbox:
    """A ``Sandbox`` for untrusted SQL over every view (close it when done):
    it opens no file (the lake's tables are read through Arrow datasets), has
    no extensions, a memory limit, and runs each query on its own cursor.
    ``partition`` (job, attempt): the lake's views hold that attempt's files
    only (what :func:`one_attempt` finds a statement needs). ``views``: the views one statement reads
    (``statements.views_read``), the only ones made (the lake's tables all come with any of its
    views); ``catalog`` may be None when there are none (``SELECT 1`` opens no catalog). ``single_use``:
    closed after one query (``Sandbox``)."""
    views = None if views is None else frozenset(views)
    reads_lake = views is None or not CATALOG_VIEW_NAMES.issuperset(views)  # a lake table or a derived view
    con, sources = _open(catalog, lake, None if views is None else CATALOG_VIEW_NAMES.intersection(views),
                         partition, sealed=True, lake_tables=None if reads_lake else ())
    lock_down(con, limits)
    return Sandbox(con, sources, limits, single_use=single_use)


# The views whose rows of one attempt are made of that attempt's files alone: the lake's partitioned tables
# and the derived views computed per attempt (per attempt and rank).
PER_ATTEMPT = frozenset(PARTITIONED) | {"collectives", "rank_progress", "dump_conflicts"}


def one_attempt(sql: str) -> tuple[str, int] | None:
    """(job, attempt) when ``sql`` is one SELECT that reads one view of
    ``PER_ATTEMPT`` (no CTE, no subquery, no other table) and whose WHERE
    requires ``job = '<text>' AND attempt = <integer>``: the statement then
    gives the same rows over that attempt's files alone, and costs what the
    attempt costs, however long the history. Else None (every file)."""
    import json

    from frlake.query.statements import syntax_text

    try:
        text = syntax_text(sql)
    except duckdb.Error:
        return None
    tree = json.loads(text)
    if tree.get("error") or len(tree.get("statements", ())) != 1:
        return None
    if text.count('"BASE_TABLE"') != 1 or '"SUBQUERY"' in text or '"TABLE_FUNCTION"' in text:
        return None
    node = tree["statements"][0]["node"]
    source = node.get("from_table") or {}
    if (node.get("type") != "SELECT_NODE" or node.get("cte_map", {}).get("map") or source.get("type") != "BASE_TABLE"
            or source.get("schema_name") or source.get("catalog_name")
            or source.get("table_name", "").lower() not in PER_ATTEMPT):
        return None
    wanted: dict[str, object] = {}
    conjuncts = [node.get("where_clause")]
    while conjuncts:
        c = conjuncts.pop()
        if not c:
            continue
        if c.get("type") == "CONJUNCTION_AND":
            conjuncts.extend(c.get("children", ()))
            continue
        if c.get("type") != "COMPARE_EQUAL":
            continue
        for column, constant in ((c.get("left"), c.get("right")), (c.get("right"), c.get("left"))):
            if (column or {}).get("class") != "COLUMN_REF" or (constant or {}).get("type") != "VALUE_CONSTANT":
                continue
            name, literal = column["column_names"][-1].lower(), constant.get("literal", {})
            if name == "job" and literal.get("kind") == "STRING":
                wanted.setdefault("job", set()).add(literal.get("text"))
            elif name == "attempt" and literal.get("kind") in ("INTEGER", "BIGINT"):
                wanted.setdefault("attempt", set()).add(int(literal.get("text")))
    if len(wanted.get("job", ())) != 1 or len(wanted.get("attempt", ())) != 1:
        return None
    return next(iter(wanted["job"])), next(iter(wanted["attempt"]))


def _open(catalog: Catalog | None, lake: Lake, catalog_views, partition, sealed: bool,
          files: Iterable | None = None,
          lake_tables: Iterable[str] | None = None,
          derived: Iterable[str] | None = None) -> tuple[duckdb.DuckDBPyConnection, dict]:
    con = duckdb.connect(":memory:", config={"threads": 2})
    try:
        sources = create_views(con, lake, catalog, catalog_views, partition, sealed=sealed, files=files,
                               lake_tables=lake_tables, derived=derived)
        con.execute("SET parquet_metadata_cache = true")  # Parquet footers read once per connection
    except BaseException:
        con.close()
        raise
    return con, sources


__all__ = ["QueryLimits", "QueryResult", "Sandbox", "connect", "one_attempt", "open_sandbox"]
