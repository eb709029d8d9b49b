"""The names of the views a query sees, by kind (docs/schema.md).

Written out, so that a command's help and the sandbox's choice of which views a statement needs load
neither DuckDB nor the catalog's models; tests/test_docs.py checks them against the code that makes the
views (frlake.schema, frlake.query.catalog_views, frlake.query.views)."""

from __future__ import annotations

VIEW_NAMES = {
    "lake tables": ("dumps", "entries", "groups", "group_runs", "pg_status", "stacks", "snapshots", "health",
                    "live_stacks", "collective_durations", "watchdog_lags", "host_links"),
    "catalog views": ("jobs", "attempts", "files", "ingest_runs", "incidents", "culprits", "rank_stats",
                      "attempt_hosts", "launcher_failures"),
    "derived views": ("hosts", "dump_conflicts", "collectives", "rank_progress"),
}
CATALOG_VIEW_NAMES = frozenset(VIEW_NAMES["catalog views"])
ALL_VIEW_NAMES = frozenset(name for names in VIEW_NAMES.values() for name in names)
