"""DuckDB views over the lake's Parquet files and the catalog's tables."""

from __future__ import annotations

from collections.abc import Iterable
from typing import TYPE_CHECKING

import duckdb
import pyarrow as pa

from frlake import schema
from frlake.query.vocabulary import END_MARKER, NEWEST_DUMP, UNEVEN
from frlake.storage.lake import Lake

if TYPE_CHECKING:  # the catalog (SQLAlchemy) is imported when a view reads it: `SELECT 1` needs none
    from frlake.catalog.store import Catalog
    from frlake.storage.files import CommittedFile

_HIVE_TYPES = "{'job': 'VARCHAR', 'attempt': 'BIGINT'}"
# Every *_ns time also as a timestamp (UTC), named without the suffix (also read by frlake.engines).
TIMESTAMPS = {
    "entries": ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"),
    "dumps": ("first_time_created_ns", "last_time_created_ns"),
    "snapshots": ("written_ns", "snapshot_ns"),
    "health": ("snapshot_ns",),
    "live_stacks": ("snapshot_ns",),
    "attempts": ("started_ns", "ended_ns"),
    "incidents": ("started_ns", "ended_ns"),
    "culprits": ("started_ns",),
    "rank_stats": ("started_ns",),
}
# One row per collective instance of every attempt: torch's ``fr_trace -o`` flat
# database for all of history. Each rank is read from the dump the diagnosis
# reads (the newest); a member "missing" holds a dump that covers the sequence
# id and has no entry there; "unknown" left no dump, or its ring buffer starts
# after the sequence id (it cannot say).
#
# Written so that a query of one attempt reads that attempt's files only: every CTE over the
# entries has one consumer (DuckDB then inlines it and pushes ``WHERE job = .. AND attempt = ..``
# down to the Parquet files), and no aggregate is DISTINCT or ordered: DuckDB plans those as
# separate passes joined on IS NOT DISTINCT FROM, which the filter does not cross, so the whole
# lake was aggregated for one attempt. Sizes and dtypes travel as text (exact, and far cheaper to
# aggregate than the lists; DuckDB's hash of nested lists is not: [[1],[2]] and [[1,2]] collide).
_ENTRIES_OF_D = f"""
      FROM entries e JOIN d USING (job, attempt, dump_id)
      WHERE NOT e.is_p2p AND e.collective_seq_id IS NOT NULL AND NOT {END_MARKER.replace("op ", "e.op ")}"""
_COLLECTIVES = f"""
    WITH d AS (
      SELECT d.job, d.attempt, d.rank, d.dump_id, d.host
      FROM dumps d LEFT JOIN snapshots s ON s.job = d.job AND s.attempt = d.attempt AND s.dump_id = d.dump_id
      QUALIFY row_number() OVER (PARTITION BY d.job, d.attempt, d.rank ORDER BY {NEWEST_DUMP}) = 1
    ), e AS (  -- each rank's first entry of each collective instance
      SELECT e.job, e.attempt, e.pg_name, e.collective_seq_id AS seq, e.rank, min(e.entry_index) AS i,
             arg_min(e.op, e.entry_index) AS op, arg_min(e.pg_desc, e.entry_index) AS pg_desc,
             arg_min((e.input_sizes, e.output_sizes)::VARCHAR, e.entry_index) AS sizes,
             arg_min((e.input_dtypes, e.output_dtypes)::VARCHAR, e.entry_index) AS dtypes,
             arg_min(e.state, e.entry_index) AS state, min(e.time_created_ns) AS t{_ENTRIES_OF_D}
      GROUP BY ALL
    ), span AS NOT MATERIALIZED (  -- each rank's first sequence id in each group: min(seq) of e, read apart
      SELECT e.job, e.attempt, e.pg_name, e.rank, min(e.collective_seq_id) AS first_seq{_ENTRIES_OF_D}
      GROUP BY ALL
    ), members AS (
      SELECT job, attempt, pg_name, list(DISTINCT r ORDER BY r) AS members FROM (
        SELECT job, attempt, pg_name, unnest(ranks) AS r FROM groups WHERE ranks IS NOT NULL
        UNION SELECT job, attempt, pg_name, rank FROM span
      ) GROUP BY ALL
    ), c AS (
      SELECT job, attempt, pg_name, seq,
             -- mode(op ORDER BY op): the smallest of the most frequent; one op, not NULL, needs no sort
             CASE WHEN min(op) = max(op) AND count(op) = count(*) THEN min(op)
                  ELSE list_aggregate(list_sort(list(op)), 'mode') END AS op,
             min(pg_desc) AS pg_desc, list_sort(list(rank)) AS arrived, min(t) AS t_first, max(t) AS t_last,
             coalesce(min(op) = max(op), false) AS ops_agree,  -- one op that is not NULL (count(DISTINCT op) = 1)
             min(sizes) = max(sizes) AS sizes_agree, min(dtypes) = max(dtypes) AS dtypes_agree,
             -- every distinct state, sorted, NULL last (list(DISTINCT state ORDER BY state))
             list_sort(list_distinct(list(state))) || CASE WHEN count(state) < count(*) THEN [NULL] ELSE [] END AS states
      FROM e GROUP BY ALL
    )
    SELECT c.job, c.attempt, c.pg_name AS pg, c.pg_desc, c.seq, c.op, m.members, c.arrived,
           -- arrived holds distinct members: as many as the members, every member arrived (the lambdas below
           -- cost a search of arrived per member, 256 x 256 per collective instance of a 256-rank group)
           CASE WHEN len(c.arrived) = len(m.members) THEN []
                ELSE list_filter(m.members, lambda r: NOT list_contains(c.arrived, r) AND list_contains(dumped.ranks, r)
                                 AND coalesce(first.f[list_position(first.r, r)], c.seq) <= c.seq) END AS missing,
           CASE WHEN len(c.arrived) = len(m.members) THEN []
                ELSE list_filter(m.members, lambda r: NOT list_contains(c.arrived, r) AND (NOT list_contains(dumped.ranks, r)
                                 OR coalesce(first.f[list_position(first.r, r)], c.seq) > c.seq)) END AS unknown,
           make_timestamp(c.t_first // 1000) AS first_arrival, make_timestamp(c.t_last // 1000) AS last_arrival,
           round((c.t_last - c.t_first) / 1e6, 3) AS spread_ms,
           c.ops_agree, c.op IN {UNEVEN} AS uneven_by_design,
           CASE WHEN c.op IN {UNEVEN} THEN NULL ELSE c.sizes_agree END AS sizes_agree,
           c.dtypes_agree, c.states
    FROM c JOIN members m USING (job, attempt, pg_name)
    JOIN (SELECT job, attempt, list(rank) AS ranks FROM d GROUP BY ALL) dumped USING (job, attempt)
    JOIN (SELECT job, attempt, pg_name, list(rank ORDER BY rank) AS r, list(first_seq ORDER BY rank) AS f
          FROM span GROUP BY ALL) first USING (job, attempt, pg_name)
"""

# Derived views that use DuckDB's list functions and lambdas, which no other engine's SQL
# shares: the other engines (frlake.engines) do without them.
DUCKDB_ONLY = frozenset({"collectives"})

DERIVED = {
    "hosts": """
        SELECT host, count(DISTINCT job) AS jobs, count(DISTINCT (job, attempt)) AS attempts, count(*) AS dumps,
               min(ingested_at) AS first_seen_at, max(ingested_at) AS last_seen_at
        FROM dumps GROUP BY host
    """,
    # Ranks of an attempt that more than one distinct dump claims: periodic snapshots, a file rewritten in
    # place, or a copy under the wrong identity. The diagnosis reads the newest (docs/diagnose.md).
    "dump_conflicts": """
        SELECT d.job, d.attempt, d.rank, count(*) AS dumps, count(DISTINCT d.host) AS hosts,
               list(struct_pack(sha256 := d.sha256, host := d.host, source_path := d.source_path,
                                snapshot := s.snapshot, last_time_created := d.last_time_created,
                                ingested_at := d.ingested_at)
                    ORDER BY s.snapshot_ns DESC NULLS LAST, d.last_time_created_ns DESC NULLS LAST,
                             d.source_mtime_ns DESC NULLS LAST, d.sha256) AS candidates
        FROM dumps d LEFT JOIN snapshots s ON s.job = d.job AND s.attempt = d.attempt AND s.dump_id = d.dump_id
        GROUP BY d.job, d.attempt, d.rank HAVING count(*) > 1
    """,
    "collectives": _COLLECTIVES,
    "rank_progress": f"SELECT *, make_timestamp(snapshot_ns // 1000) AS snapshot FROM ({schema.RANK_PROGRESS_SQL.format(where='')})",
}


# The lake tables each derived view reads.
DERIVED_FROM = {"hosts": ("dumps",), "dump_conflicts": ("dumps", "snapshots"),
                "collectives": ("dumps", "snapshots", "entries", "groups"), "rank_progress": ("snapshots",)}

LEAD = ("job", "attempt", "rank", "host")  # what `SELECT *` shows first, where a view has them


def with_timestamps(name: str, source: str, columns: Iterable[str] = ()) -> str:
    """The view's SQL: the identity columns first (a wide `SELECT *` still says whose rows they are), then
    the rest in the table's order, then each ``*_ns`` time as a timestamp."""
    extra = "".join(
        f", make_timestamp({col} // 1000) AS {col.removesuffix('_ns')}" for col in TIMESTAMPS.get(name, ())
    )
    columns = list(columns)
    ordered = [c for c in LEAD if c in columns] + [c for c in columns if c not in LEAD]
    return f"SELECT {', '.join(ordered) if ordered else '*'}{extra} FROM {source}"


def _parquet(name: str, table_schema: pa.Schema, partitioned: bool, files: list[str], versions: list[int],
             listing=None) -> str:
    """The files of a table as one relation in its current columns: the files of each schema version read
    together, the columns a version lacks given as NULL. ``listing(version, files)``: the SQL of a list of
    files (default: a list of string literals)."""
    listing = listing or (lambda version, some: _listing(some))
    options = f"hive_partitioning = {str(partitioned).lower()}"
    if partitioned:
        options += f", hive_types = {_HIVE_TYPES}"
    if len(set(versions)) == 1 and not schema.columns_missing(name, versions[0]):
        # Every file holds frlake.schema's columns, so no union_by_name: it would make DuckDB read every
        # file's footer to build the view.
        return f"read_parquet({listing(versions[0], files)}, {options})"
    parts = []
    for version in sorted(set(versions)):
        some = listing(version, [f for f, v in zip(files, versions, strict=True) if v == version])
        missing = schema.columns_missing(name, version)
        columns = [f"NULL::{_DUCKDB_TYPES[table_schema.field(c).type]} AS {c}" if c in missing else c
                   for c in table_schema.names] + (_HIVE_COLUMNS if partitioned else [])
        parts.append(f"SELECT {', '.join(columns)} FROM read_parquet({some}, {options})")
    return "(" + " UNION ALL ".join(parts) + ")"


_DUCKDB_TYPES = {pa.int64(): "BIGINT"}  # the types of the columns a schema version added
_HIVE_COLUMNS = sorted(f.name for f in schema.PARTITION_FIELDS)  # where read_parquet puts them: in name order


def _listing(files: list[str]) -> str:
    return "[" + ", ".join(_sql_str(f) for f in files) + "]"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_views(con: duckdb.DuckDBPyConnection, lake: Lake, catalog: Catalog | None,
                 catalog_views: Iterable[str] | None = None, partition: tuple[str, int] | None = None,
                 sealed: bool = False, files: Iterable[CommittedFile] | None = None,
                 lake_tables: Iterable[str] | None = None,
                 derived: Iterable[str] | None = None) -> dict[str, object]:
    """Create one view per lake table (over committed Parquet files only) and
    register the catalog tables. Returns the Python objects registered, by
    name (a cursor of ``con`` must register them again to see the views).

    ``catalog_views``: the catalog views to make (None: every one). ``catalog`` is read only for what is
    made (None when nothing is: no catalog view, ``lake_tables`` empty).

    ``sealed`` (the SQL sandbox): the lake's files are read through Arrow
    datasets, not DuckDB's file readers, so the connection needs no file
    system at all and can be denied every path, the lake's own included.

    ``files``: the committed files to read, when the caller has them (several attempts diagnosed on one
    connection, ``LakeFiles.committed_in``), instead of the catalog's of ``partition``.

    ``lake_tables``: the lake's tables to make views of (a fleet report reads one, or none), so that the
    catalog's list of every other table's files is not read; the others, and the derived views that read
    them, do not exist on the connection (a query that reads one fails by its name, never reads nothing).

    ``derived``: the derived views to make (None: each whose tables are made). DuckDB binds a view when it
    is made: ``collectives`` alone costs 7 ms, a diagnosis reads none."""
    sources: dict[str, object] = {}
    catalog_views = None if catalog_views is None else tuple(catalog_views)

    def register(name: str, obj: object) -> str:
        con.register(name, obj)
        sources[name] = obj
        return name

    tables = schema.TABLES if lake_tables is None else {n: schema.TABLES[n] for n in lake_tables}
    if not tables:
        committed = {}
    elif files is None:
        from frlake.storage.files import LakeFiles

        committed = LakeFiles(catalog).table_file_versions(partition, tables=None if lake_tables is None else tables)
    else:
        committed = {}
        for f in files:
            committed.setdefault(f.table, []).append((f.readable, f.schema_version))
    root = str(lake.root)
    lazy: dict[str, tuple[str, str]] = {}  # a lake table's macro parameters and relation, read by its view through a table macro (see below)
    for name, table_schema in tables.items():
        partitioned = name in schema.PARTITIONED
        fields = list(table_schema) + (schema.PARTITION_FIELDS if partitioned else [])
        versions = [v for _, v in committed.get(name, ())]
        files = [f"{root}/{p}" for p, _ in committed.get(name, ())]  # not Path: thousands of files
        if name in schema.SCHEMA_VERSIONS:  # the oldest schema of its files (a diagnosis reads the signatures
            oldest = min(versions, default=schema.schema_version(name))  # only when every file has them)
            con.execute(f"SET VARIABLE {schema.schema_variable(name)} = {oldest}")
        if files and sealed:
            # The same columns in the same order as read_parquet's view, which puts hive columns in name order.
            hive_fields = sorted(schema.PARTITION_FIELDS, key=lambda f: f.name) if partitioned else []
            import pyarrow.dataset as ds  # only here: importing it reserves about 1 GB of address space

            hive = ds.partitioning(pa.schema(hive_fields), flavor="hive") if partitioned else None
            dataset = ds.dataset(files, schema=pa.schema(list(table_schema) + hive_fields), format="parquet",
                                 partitioning=hive,
                                 partition_base_dir=str(lake.tables / name))
            source = register(f"__lake_{name}", dataset)
        elif files:
            # DuckDB binds a view when it is made, and binding read_parquet over a list of files costs in
            # the number of files (thousands at 100M entries), for every table and every derived view that
            # reads it. So the view reads a table macro, made first over an empty table of the same columns
            # and replaced by the files once every view is made: nothing reads the files' list until a
            # query reads the view. The lists are variables, not SQL text to parse, and reach the macro as
            # the defaults of its parameters: a macro whose body reads a variable is bound when it is made
            # (every file listed), one whose body reads its parameters only when a query calls it.
            params: dict[str, str] = {}

            def listing(version: int, some: list[str], name=name, params=params) -> str:
                variable = f"__frlake_files_{name}_{version}"
                con.execute(f"SET VARIABLE {variable} = ?", [some])
                params[f"files_{version}"] = f"getvariable('{variable}')"
                return f"files_{version}"

            relation = _parquet(name, table_schema, partitioned, files, versions, listing)
            lazy[name] = (", ".join(f"{p} := {default}" for p, default in params.items()), relation)
            empty = register(f"__empty_{name}", pa.schema(fields).empty_table())
            con.execute(f"CREATE OR REPLACE MACRO __lake_{name}() AS TABLE SELECT * FROM {empty}")
            source = f"__lake_{name}()"
        else:
            source = register(f"__empty_{name}", pa.schema(fields).empty_table())
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {with_timestamps(name, source, [f.name for f in fields])}")
    if catalog_views is None or catalog_views:
        from frlake.query.catalog_views import CATALOG_VIEWS, LazyCatalogTable

        for name in CATALOG_VIEWS if catalog_views is None else catalog_views:
            table = LazyCatalogTable(catalog, name)  # read from the catalog when a query first reads the view
            source = register(f"__catalog_{name}", table)
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {with_timestamps(name, source, table.column_names)}")
    wanted = DERIVED.keys() if derived is None else set(derived)
    for name, sql in DERIVED.items():
        if name in wanted and set(DERIVED_FROM[name]) <= tables.keys():
            con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    for name, (params, relation) in lazy.items():  # a query binds them, when it reads them
        con.execute(f"CREATE OR REPLACE MACRO __lake_{name}({params}) AS TABLE SELECT * FROM {relation}")
    return sources
