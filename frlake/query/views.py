"""DuckDB views over the lake's Parquet files and the catalog's tables."""

from __future__ import annotations

import duckdb
import pyarrow as pa

from frlake import schema
from frlake.catalog.store import CATALOG_VIEWS, Catalog
from frlake.lake import Lake

LAKE_VIEWS = tuple(schema.TABLES)
_HIVE_TYPES = "{'job': 'VARCHAR', 'attempt': 'BIGINT'}"


def _sql_str(text: str) -> str:
    return "'" + text.replace("'", "''") + "'"


def create_views(con: duckdb.DuckDBPyConnection, lake: Lake, catalog: Catalog) -> None:
    """Create one view per lake table (over committed Parquet files only) and
    register the catalog tables."""
    for name, table_schema in schema.TABLES.items():
        files = [str(lake.root / p) for p in catalog.lake_files(name)]
        partitioned = name in schema.PARTITIONED
        if files:
            listing = "[" + ", ".join(_sql_str(f) for f in files) + "]"
            options = f"hive_partitioning = {str(partitioned).lower()}, union_by_name = true"
            if partitioned:
                options += f", hive_types = {_HIVE_TYPES}"
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM read_parquet({listing}, {options})")
        else:
            fields = list(table_schema) + (schema.PARTITION_FIELDS if partitioned else [])
            empty = pa.schema(fields).empty_table()
            con.register(f"__empty_{name}", empty)
            con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM __empty_{name}")
    for name in CATALOG_VIEWS:
        con.register(f"__catalog_{name}", catalog.table_arrow(name))
        con.execute(f"CREATE OR REPLACE VIEW {name} AS SELECT * FROM __catalog_{name}")
