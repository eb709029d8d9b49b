"""Many small attempts read through one connection (a batch of diagnoses).

A connection with views over one attempt's files costs more to open than a
4-rank attempt costs to diagnose, and every query of the diagnosis reads the
attempt's Parquet files again. So the session diagnoses small attempts in
batches: one connection over the committed files of all of them, their rows
read once into memory (:class:`AttemptBatch`), and each attempt then read on
it through the same views, its own rows picked by the diagnosis' ``WHERE job
= .. AND attempt = ..``, as on a connection of its own (:meth:`AttemptBatch.select`
sets what such a connection would hold). The caller bounds a batch by its
files' bytes."""

from __future__ import annotations

from collections.abc import Sequence

import duckdb

from frlake import schema
from frlake.storage.files import CommittedFile


class AttemptBatch:
    """The partitioned tables' rows of the ``files`` (of several attempts) held in memory on ``con``, a
    connection whose views read those files (``connect(..., files=files)``)."""

    def __init__(self, con: duckdb.DuckDBPyConnection, files: Sequence[CommittedFile]):
        self.con = con
        versions: dict[tuple[str, int], dict[str, int]] = {}  # attempt -> table -> its files' oldest schema
        for f in files:
            if f.job is not None and f.table in schema.SCHEMA_VERSIONS:
                by_table = versions.setdefault((f.job, f.attempt), {})
                by_table[f.table] = min(f.schema_version, by_table.get(f.table, f.schema_version))
        self._versions = versions
        self._set: dict[str, int] = {}  # the variables' values now
        # whether the views hold an attempt's summary rows: its summary files (never written empty)
        self.summarised = {(f.job, f.attempt) for f in files if f.table in schema.SUMMARY_TABLES}
        # the rows in the order the views read them (file by file, by id): each attempt's in the order a
        # connection over its own files reads them
        # (sorted by attempt, so that a query of one attempt finds its rows together; a table, not a view
        # over it, so that each query binds one name)
        # The entries only when an attempt reads them on its own (:meth:`hold_entries`): a batch's statements
        # (frlake.diagnose.batched) read the few columns they need from the files once, where holding every
        # column of every entry cost more than all of them.
        self._views = sorted({f.table for f in files if f.job is not None})
        for name in self._views:
            if name != "entries":
                self._hold(name)

    def _hold(self, name: str) -> None:
        if name in self._views:
            self.con.execute(f"CREATE TABLE __batch_{name} AS SELECT * FROM {name} ORDER BY job, attempt")
            self.con.execute(f"DROP VIEW {name}")
            self.con.execute(f"ALTER TABLE __batch_{name} RENAME TO {name}")
            self._views.remove(name)

    def hold_entries(self) -> None:
        """Hold the entries' rows in memory too (once): before an attempt whose diagnosis reads its entries
        statement by statement."""
        self._hold("entries")

    def signed(self, key: tuple[str, int]) -> bool:
        """Whether every entries file of the attempt stores the entries' signatures (schema version 2)."""
        return self._versions.get(key, {}).get("entries", schema.schema_version("entries")) >= 2

    def select(self, job: str, attempt: int) -> None:
        """Make the connection read as one over this attempt's files would: the schema variables (a
        diagnosis reads the entries' stored signatures only when each of its files has them) are its own
        files' oldest schema versions, not the batch's."""
        own = self._versions.get((job, attempt), {})
        for name in schema.SCHEMA_VERSIONS:
            if name not in schema.PARTITIONED:
                continue  # every attempt reads the same files of it (stacks)
            version = own.get(name, schema.schema_version(name))
            if self._set.get(name) != version:
                self.con.execute(f"SET VARIABLE {schema.schema_variable(name)} = {version}")
                self._set[name] = version
