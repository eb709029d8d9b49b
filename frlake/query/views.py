"""DuckDB views over the lake's Parquet files and the catalog's tables."""

from __future__ import annotations

from collections.abc import Iterable

import duckdb
import pyarrow as pa
import pyarrow.dataset as ds

from frlake import schema
from frlake.catalog.store import Catalog
from frlake.lake import Lake
from frlake.query.catalog_views import CATALOG_VIEWS, catalog_table

_HIVE_TYPES = "{'job': 'VARCHAR', 'attempt': 'BIGINT'}"
# Every *_ns time also as a timestamp (UTC), named without the suffix (also read by frlake.engines).
TIMESTAMPS = {
    "entries": ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns"),
    "dumps": ("first_time_created_ns", "last_time_created_ns"),
    "attempts": ("started_ns", "ended_ns"),
    "incidents": ("started_ns", "ended_ns"),
    "culprits": ("started_ns",),
    "rank_stats": ("started_ns",),
}
DERIVED = {
    "hosts": """
        SELECT host, count(DISTINCT job) AS jobs, count(DISTINCT (job, attempt)) AS attempts, count(*) AS dumps,
               min(ingested_at) AS first_seen_at, max(ingested_at) AS last_seen_at
        FROM dumps GROUP BY host
    """,
    # Ranks of an attempt that more than one distinct dump claims: periodic snapshots, a file rewritten in
    # place, or a copy under the wrong identity. The diagnosis reads the newest (docs/diagnose.md).
    "dump_conflicts": """
        SELECT job, attempt, rank, count(*) AS dumps, count(DISTINCT host) AS hosts,
               list(struct_pack(sha256 := sha256, host := host, source_path := source_path,
                                last_time_created := last_time_created, ingested_at := ingested_at)
                    ORDER BY last_time_created_ns DESC NULLS LAST, source_mtime_ns DESC NULLS LAST, sha256) AS candidates
        FROM dumps GROUP BY job, attempt, rank HAVING count(*) > 1
    """,
}


def with_timestamps(name: str, source: str) -> str:
    extra = "".join(
        f", make_timestamp({col} // 1000) AS {col.removesuffix('_ns')}" for col in TIMESTAMPS.get(name, ())
    )
    return f"SELECT *{extra} FROM {source}"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_views(con: duckdb.DuckDBPyConnection, lake: Lake, catalog: Catalog,
                 catalog_views: Iterable[str] | None = None, partition: tuple[str, int] | None = None,
                 sealed: bool = False) -> dict[str, object]:
    """Create one view per lake table (over committed Parquet files only) and
    register the catalog tables. Returns the Python objects registered, by
    name (a cursor of ``con`` must register them again to see the views).

    ``sealed`` (the SQL sandbox): the lake's files are read through Arrow
    datasets, not DuckDB's file readers, so the connection needs no file
    system at all and can be denied every path, the lake's own included."""
    sources: dict[str, object] = {}

    def register(name: str, obj: object) -> str:
        con.register(name, obj)
        sources[name] = obj
        return name

    committed = catalog.table_files(partition)
    for name, table_schema in schema.TABLES.items():
        partitioned = name in schema.PARTITIONED
        fields = list(table_schema) + (schema.PARTITION_FIELDS if partitioned else [])
        files = [str(lake.root / p) for p in committed.get(name, ())]
        if files and sealed:
            # The same columns in the same order as read_parquet's view, which puts hive columns in name order.
            hive_fields = sorted(schema.PARTITION_FIELDS, key=lambda f: f.name) if partitioned else []
            hive = ds.partitioning(pa.schema(hive_fields), flavor="hive") if partitioned else None
            dataset = ds.dataset(files, schema=pa.schema(list(table_schema) + hive_fields), format="parquet",
                                 partitioning=hive,
                                 partition_base_dir=str(lake.tables / name))
            source = register(f"__lake_{name}", dataset)
        elif files:
            listing = "[" + ", ".join(_sql_str(f) for f in files) + "]"
            # Every file of a table is written with frlake.schema's columns, so no union_by_name:
            # it would make DuckDB read every file's footer to build the view.
            options = f"hive_partitioning = {str(partitioned).lower()}"
            if partitioned:
                options += f", hive_types = {_HIVE_TYPES}"
            source = f"read_parquet({listing}, {options})"
        else:
            source = register(f"__empty_{name}", pa.schema(fields).empty_table())
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {with_timestamps(name, source)}")
    for name in CATALOG_VIEWS if catalog_views is None else catalog_views:
        source = register(f"__catalog_{name}", catalog_table(catalog, name))
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {with_timestamps(name, source)}")
    for name, sql in DERIVED.items():
        con.execute(f"CREATE OR REPLACE VIEW {name} AS {sql}")
    return sources
