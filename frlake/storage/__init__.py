"""The storage wing: how bytes become committed files of the lake and leave again (docs/lake.md).

A writer stages Parquet files in the lake folder (:mod:`.lake`), records them pending in the catalog
(:mod:`.files`), and publishes them (:mod:`.publish`): hidden names, then one catalog transaction that
makes them visible with whatever the writer changes (an ingest's dumps, a diagnosis and its
:mod:`.summary_tables`), then their final names. Files leave the same way: :mod:`.compact` merges small
ones, :mod:`.forget` (with :mod:`.forget_plan`) drops dumps, both through :mod:`.rewrite`; the replaced
files are retired and swept once no reader can still use them.

The wing sits above the catalog, which knows nothing of it, and below ingest, the query layer and the
session. Nothing is imported here: a command that needs none of it loads none of it.
"""
