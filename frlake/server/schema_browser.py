"""The SQL console's schema browser: every view a query sees, its columns
and types (from DuckDB), and their meaning (docs/schema.md)."""

from __future__ import annotations

import duckdb

from frlake.query.schema_doc import meaning, schema_meanings


def view_names() -> list[str]:
    from frlake.query.catalog_views import CATALOG_VIEWS
    from frlake.query.views import DERIVED
    from frlake.schema import TABLES

    return list(dict.fromkeys([*TABLES, *CATALOG_VIEWS, *DERIVED]))


def schema_browser(con: duckdb.DuckDBPyConnection) -> list[dict]:
    names = view_names()
    rows = con.execute(
        """SELECT table_name, column_name, data_type FROM information_schema.columns
           WHERE table_schema = 'main' AND list_contains(?, table_name) ORDER BY ordinal_position""",
        [names],
    ).fetchall()
    columns: dict[str, list[dict]] = {n: [] for n in names}
    for view, column, type_ in rows:
        columns[view].append({"name": column, "type": type_, "meaning": meaning(view, column)})
    docs = schema_meanings()
    return [{"view": n, "about": docs.get(n, {}).get("about", ""), "columns": columns[n]} for n in names]
