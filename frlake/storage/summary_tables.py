"""The lake's summary tables (``frlake.schema.SUMMARY_TABLES``): what a fleet
report needs of one attempt's entries, computed once, when the session
diagnoses the attempt, instead of on every report (docs/lake.md, "Summary
tables").

The session computes an attempt's :class:`AttemptSummary` on the connection
it diagnosed the attempt on (frlake.query.links), and a :class:`SummaryWriter`
stores the diagnosis together with those rows. Under the lake's write lock
the new files are published under hidden names (frlake.storage.publish), and
one catalog transaction stores the diagnosis, makes the new files visible
and retires the attempt's old ones.
So an attempt's summaries are always those of its stored diagnosis: a
diagnosis made from an older revision than the stored one stores neither; a
crash before the transaction leaves pending files, which the next writer
removes, and the attempt still due; an attempt whose dumps change (an
ingest, a partial forget) is due again and both are rewritten; a forgotten
attempt loses its summary files with the rest of its files.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import pyarrow as pa

from frlake.catalog.store import Catalog
from frlake.entities import Diagnosis
from frlake.schema import SUMMARY_TABLES
from frlake.storage.files import CommittedFile, LakeFiles, LakeFileSpec, switch
from frlake.storage.lake import Lake, new_part_name, sync
from frlake.storage.publish import DEFAULT_GRACE_S, Staged, publish, recover, sweep


@dataclass(frozen=True)
class AttemptSummary:
    """An attempt's new summary rows (by table), and whether its views held
    summary rows already (files are never written empty, so: whether it has
    summary files to retire)."""

    tables: Mapping[str, pa.Table]
    had_rows: bool


class _Superseded(Exception):
    """The catalog kept a newer diagnosis (or the attempt is gone): the new files are withdrawn."""


class SummaryWriter:
    """Stores diagnoses with their summary rows (``with`` it; one run,
    ``kind = 'diagnose'``, for all the files it writes, begun at the first)."""

    def __init__(self, catalog: Catalog, lake: Lake, lock_timeout_s: float | None = 600.0,
                 grace_s: float = DEFAULT_GRACE_S):
        self.catalog, self.lake = catalog, lake
        self.lock_timeout_s, self.grace_s = lock_timeout_s, grace_s
        self.run_id: int | None = None
        self._staging = None  # the run's own staging folder, held while the writer lives
        self._run_lake: Lake | None = None
        self._files = 0
        self._recovered = False

    def __enter__(self) -> SummaryWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if self.run_id is None:
            return
        try:
            self._staging.__exit__(exc_type, exc, tb)
        finally:
            self.catalog.runs.finish(self.run_id, "failed" if exc_type else "finished", {})

    def store(self, diag: Diagnosis, revision: int, summary: AttemptSummary | None) -> bool:
        """Store ``diag`` (made from the attempt at ``revision``) and make
        ``summary`` the attempt's summary rows; None keeps the stored ones
        (the session passes it for an attempt whose diagnosis was not due:
        they are of this revision). False: the catalog holds a newer
        diagnosis, or the attempt is gone, and nothing was stored."""
        if summary is None:
            return self.catalog.diagnoses.save(diag, revision)
        key = (diag.job, diag.attempt)
        rows = {name: t for name, t in summary.tables.items() if t.num_rows}
        if not rows and not summary.had_rows:
            # Nothing to publish or retire (no lock, no catalog read): an attempt without timed entries. A
            # summary another process committed since these views were made is of a newer revision (then the
            # catalog keeps its diagnosis and refuses this one) or of this one or an older, which had no
            # rows either: a revision only adds dumps, and a forget retires the summary itself.
            return self.catalog.diagnoses.save(diag, revision)
        run_lake = self._run()
        staged = []
        try:
            for name in sorted(rows):
                path, size = run_lake.stage_table(rows[name])
                self._files += 1
                rel = self.lake.part_path(name, new_part_name(self.run_id, self._files), *key)
                staged.append(Staged(path, LakeFileSpec(name, rel, *key, rows[name].num_rows, size)))
            with self.lake.write_lock(self.lock_timeout_s):
                if not self._recovered:  # what a killed writer (a diagnosis too) left pending goes first
                    recover(self.lake, self.catalog)
                    self._recovered = True
                old = self._committed(key)  # under the lock: no other writer replaces them meanwhile

                def commit(ids: list[int]) -> None:
                    if not self.catalog.diagnoses.save(diag, revision, also=lambda s: switch(s, ids, old)):
                        raise _Superseded

                try:
                    publish(self.lake, self.catalog, self.run_id, staged, commit)
                except _Superseded:
                    return False
                sweep(self.lake, self.catalog, self.grace_s)  # the old files' final names go at once
            return True
        finally:
            for s in staged:
                s.staged.unlink(missing_ok=True)

    def store_many(self, items: Sequence[tuple[Diagnosis, int, AttemptSummary | None]]) -> list[bool]:
        """:meth:`store` of several attempts at once: their files staged, then under the write lock one
        publication and one catalog transaction for all of them (a batch of small attempts costs what its
        rows cost, not a lock, a publication and a transaction each). Whether each was stored: when the
        catalog holds a newer diagnosis of one of them, or one is gone, none is stored in that transaction
        and each is stored on its own instead (:meth:`store`)."""
        plain = [i for i, (_, _, summary) in enumerate(items)
                 if summary is None or not (summary.had_rows or any(t.num_rows for t in summary.tables.values()))]
        stored = [False] * len(items)
        if plain:
            for i, ok in zip(plain, self.catalog.diagnoses.save_many([items[i][:2] for i in plain]), strict=True):
                stored[i] = ok
        published = [i for i in range(len(items)) if i not in set(plain)]
        if not published:
            return stored
        run_lake = self._run()
        staged, owner = [], []  # the staged files, and the item each belongs to
        try:
            for i in published:
                diag, _, summary = items[i]
                for name, table in sorted(summary.tables.items()):
                    if table.num_rows:
                        path, size = run_lake.stage_table(table, synced=False)
                        self._files += 1
                        rel = self.lake.part_path(name, new_part_name(self.run_id, self._files), diag.job, diag.attempt)
                        staged.append(Staged(path, LakeFileSpec(name, rel, diag.job, diag.attempt, table.num_rows, size)))
                        owner.append(i)
            sync(s.staged for s in staged)  # on disk before the catalog commits them
            with self.lake.write_lock(self.lock_timeout_s):
                if not self._recovered:
                    recover(self.lake, self.catalog)
                    self._recovered = True
                keys = [(items[i][0].job, items[i][0].attempt) for i in published]
                old = LakeFiles(self.catalog).committed_in(keys, SUMMARY_TABLES)  # under the lock, as in store

                def commit(ids: list[int]) -> None:
                    def also(s, saved: list[bool]) -> None:
                        if not all(saved):
                            raise _Superseded
                        switch(s, ids, old)

                    self.catalog.diagnoses.save_many([items[i][:2] for i in published], also=also)

                try:
                    publish(self.lake, self.catalog, self.run_id, staged, commit)
                except _Superseded:
                    superseded = True
                else:
                    superseded = False
                    sweep(self.lake, self.catalog, self.grace_s)
        finally:
            for s in staged:
                s.staged.unlink(missing_ok=True)
        for i in published:
            stored[i] = self.store(*items[i]) if superseded else True
        return stored

    def _committed(self, key: tuple[str, int]) -> list[CommittedFile]:
        records = LakeFiles(self.catalog)
        return [f for table in SUMMARY_TABLES for f in records.committed(table, key)]

    def _run(self) -> Lake:
        if self._run_lake is None:
            self.run_id = self.catalog.runs.begin(json.dumps([]), json.dumps({}), kind="diagnose")
            self._staging = self.lake.run_staging(self.run_id)
            try:
                self._run_lake = self._staging.__enter__()
            except BaseException:
                self.catalog.runs.finish(self.run_id, "failed", {})
                self.run_id = None
                raise
        return self._run_lake
