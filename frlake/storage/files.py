"""The lake's files as the catalog records them: Parquet files from intent to publication (pending ->
publishing -> committed), and the retired files a later run deletes once no reader can still use them
(docs/lake.md). :class:`LakeFiles` reads and changes these records, each call in a transaction of its own;
:func:`mark_publishing`, :func:`retire` and :func:`switch` change them inside a transaction that a writer
opens for more (an ingest's dumps, a diagnosis, a forget)."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, or_, select, update
from sqlalchemy.orm import Session

from frlake.catalog.db import chunks, utcnow
from frlake.catalog.models import Dump, LakeFile, RetiredFile
from frlake.catalog.store import Catalog
from frlake.storage.lake import hidden_path

_AT_ONCE = datetime(1970, 1, 1, tzinfo=UTC)  # retired_at of a name the next sweep deletes, whatever the grace
VISIBLE = ("publishing", "committed")  # the statuses frlake's views read


def _in_partitions(s: Session, q, partitions: Iterable[tuple[str | None, int | None]], key_of) -> list:
    """The rows of ``q`` in these (job, attempt) partitions (``key_of(row)``: a row's), a chunk of them per
    statement. A statement asks for every job and every attempt number of its chunk, which the index by
    partition answers (migration 0016; an OR of the pairs made SQLite read every visible file's record),
    and the pairs asked are kept. The partition of no job (``stacks``: job and attempt None) is read by a
    statement of its own."""
    keys = sorted(set(partitions), key=lambda p: (p[0] or "", p[1] or 0))
    rows = list(s.execute(q.where(LakeFile.job.is_(None)))) if any(job is None for job, _ in keys) else []
    for chunk in chunks([k for k in keys if k[0] is not None]):
        asked = set(chunk)
        rows += [r for r in s.execute(q.where(LakeFile.job.in_(sorted({j for j, _ in chunk})),
                                              LakeFile.attempt.in_(sorted({a for _, a in chunk}))))
                 if key_of(r) in asked]
    return rows


def partition_order(row: tuple) -> tuple:
    """The order of (table, job, attempt, ...) rows: by table, job and attempt (``stacks``' None first)."""
    return row[0], row[1] or "", row[2] or 0


@dataclass(frozen=True)
class LakeFileSpec:
    table: str
    path: str  # relative to the lake
    job: str | None
    attempt: int | None
    rows: int
    bytes: int


@dataclass(frozen=True)
class CommittedFile:
    """A Parquet file frlake's views read, at ``readable``: its hidden name,
    which stays while the file is committed (outside readers see ``path``)."""

    id: int
    table: str
    path: str
    job: str | None
    attempt: int | None
    rows: int
    bytes: int
    status: str
    hidden: bool = True
    schema_version: int = 1  # of its table's schema (frlake.schema.SCHEMA_VERSIONS)

    @property
    def readable(self) -> str:
        return hidden_path(self.path) if self.hidden else self.path


@dataclass(frozen=True)
class Retired:
    id: int
    path: str
    kind: str  # parquet | raw
    sha256: str | None


class LakeFiles:
    """The catalog's records of the lake's files: ``LakeFiles(catalog)`` reads and changes them through
    that catalog's one ``session`` helper."""

    def __init__(self, catalog: Catalog):
        self.session = catalog.session

    # -- publication ----------------------------------------------------------
    def add_pending(self, run_id: int, specs: Sequence[LakeFileSpec]) -> list[int]:
        """Record Parquet files about to be moved into the lake (the intent)."""
        from frlake.schema import schema_version

        now = utcnow()
        with self.session(write=True) as s:
            rows = [
                LakeFile(table_name=f.table, path=f.path, job=f.job, attempt=f.attempt, rows=f.rows,
                         bytes=f.bytes, run_id=run_id, status="pending", created_at=now, hidden=True,
                         schema_version=schema_version(f.table))  # every writer writes the current schema
                for f in specs
            ]
            s.add_all(rows)
            s.flush()
            return [r.id for r in rows]

    def pending(self) -> list[tuple[int, str, int]]:
        """(id, path, run id) of every Parquet file recorded as being published."""
        with self.session() as s:
            return [tuple(r) for r in s.execute(
                select(LakeFile.id, LakeFile.path, LakeFile.run_id).where(LakeFile.status == "pending"))]

    def publishing(self) -> list[tuple[int, str]]:
        """(id, path) of the committed files still at their hidden names."""
        with self.session() as s:
            return [tuple(r) for r in s.execute(
                select(LakeFile.id, LakeFile.path).where(LakeFile.status == "publishing").order_by(LakeFile.id))]

    def drop(self, ids: Sequence[int]) -> None:
        with self.session(write=True) as s:
            for chunk in chunks(list(ids)):
                s.execute(delete(LakeFile).where(LakeFile.id.in_(chunk)))

    def mark_revealed(self, revealed: Sequence[tuple[int, str, bool]]) -> None:
        """Files now linked at their final names: ``committed`` (``bool``:
        the hidden name is still there, where frlake's views keep reading)."""
        with self.session(write=True) as s:
            for left in (True, False):
                ids = [i for i, _, kept in revealed if kept is left]
                for chunk in chunks(ids):
                    s.execute(update(LakeFile).where(LakeFile.id.in_(chunk)).values(status="committed", hidden=left))

    def replace(self, new_ids: Sequence[int], old: Sequence[CommittedFile]) -> None:
        """One transaction: a compaction's merged files replace the ones they hold."""
        with self.session(write=True) as s:
            switch(s, new_ids, old)

    # -- reading --------------------------------------------------------------
    def committed(self, table: str | None = None, partition: tuple[str, int] | None = None) -> list[CommittedFile]:
        q = select(LakeFile.id, LakeFile.table_name, LakeFile.path, LakeFile.job, LakeFile.attempt, LakeFile.rows,
                   LakeFile.bytes, LakeFile.status, LakeFile.hidden,
                   LakeFile.schema_version).where(LakeFile.status.in_(VISIBLE))
        if table is not None:
            q = q.where(LakeFile.table_name == table)
        if partition is not None:
            q = q.where(LakeFile.job == partition[0], LakeFile.attempt == partition[1])
        with self.session() as s:
            return [CommittedFile(*r) for r in s.execute(q.order_by(LakeFile.id))]

    def committed_in(self, partitions: Iterable[tuple[str, int]], tables: Iterable[str] | None = None,
                     *, unpartitioned: bool = False) -> list[CommittedFile]:
        """:meth:`committed` of several (job, attempt) partitions (of ``tables`` only, when given), a chunk of
        keys per statement; with ``unpartitioned``, the files of no partition too (``stacks``). By id."""
        q = select(LakeFile.id, LakeFile.table_name, LakeFile.path, LakeFile.job, LakeFile.attempt, LakeFile.rows,
                   LakeFile.bytes, LakeFile.status, LakeFile.hidden,
                   LakeFile.schema_version).where(LakeFile.status.in_(VISIBLE))
        if tables is not None:
            q = q.where(LakeFile.table_name.in_(list(tables)))
        with self.session() as s:
            rows = {r[0]: CommittedFile(*r) for r in _in_partitions(s, q, partitions, lambda r: (r[3], r[4]))}
            if unpartitioned:
                rows.update((r[0], CommittedFile(*r)) for r in s.execute(q.where(LakeFile.job.is_(None))))
        return [rows[i] for i in sorted(rows)]

    def paths(self, table: str, partition: tuple[str, int] | None = None) -> list[str]:
        """Where to read the committed Parquet files of one table (of one job
        and attempt, if ``partition`` is given), relative to the lake."""
        return [f.readable for f in self.committed(table, partition)]

    def table_files(self, partition: tuple[str, int] | None = None, *,
                    final: bool = False) -> dict[str, list[str]]:
        """Where to read the committed Parquet files of every table, in one
        query: of one (job, attempt) ``partition`` for the partitioned tables
        when given, and every file of the unpartitioned ``stacks``.
        ``final``: their final names (outside engines such as Spark skip
        hidden names), for the files that are fully committed."""
        return {table: [path for path, _ in files]
                for table, files in self.table_file_versions(partition, final=final).items()}

    def table_file_versions(self, partition: tuple[str, int] | None = None, *,
                            final: bool = False, tables: Iterable[str] | None = None) -> dict[str, list[tuple[str, int]]]:
        """:meth:`table_files`, each path with the schema version of its file (of ``tables`` only, when given)."""
        statuses = ("committed",) if final else VISIBLE
        q = (select(LakeFile.id, LakeFile.table_name, LakeFile.path, LakeFile.hidden, LakeFile.schema_version)
             .where(LakeFile.status.in_(statuses)))
        if tables is not None:
            q = q.where(LakeFile.table_name.in_(list(tables)))
        # the partition's files and the unpartitioned ones in two statements: an OR of the two would read
        # every visible file's record instead of the partition index's few (migration 0016)
        reads = [q] if partition is None else [
            q.where(LakeFile.job == partition[0], LakeFile.attempt == partition[1]), q.where(LakeFile.job.is_(None))]
        out: dict[str, list[tuple[str, int]]] = {}
        with self.session() as s:
            rows = sorted((r for read in reads for r in s.execute(read)), key=lambda r: r[0])
        for _, table, path, hidden, version in rows:
            out.setdefault(table, []).append((hidden_path(path) if hidden and not final else path, version))
        return out

    def partition_file_counts(self, partitions: Iterable[tuple[str, int]] | None = None,
                              min_files: int = 2) -> list[tuple[str, str | None, int | None, int]]:
        """(table, job, attempt, files) of every partition of every table with
        at least ``min_files`` committed files (of ``partitions`` only, when given;
        ``stacks`` is one partition, job and attempt None)."""
        q = (select(LakeFile.table_name, LakeFile.job, LakeFile.attempt, func.count(LakeFile.id))
             .where(LakeFile.status.in_(VISIBLE))
             .group_by(LakeFile.table_name, LakeFile.job, LakeFile.attempt)
             .having(func.count(LakeFile.id) >= min_files))
        return self._of_partitions(q, partitions)

    def old_schema_partitions(self, partitions: Iterable[tuple[str, int]] | None = None
                              ) -> list[tuple[str, str | None, int | None]]:
        """(table, job, attempt) of every partition (of ``partitions`` only, when given) that holds a file
        written with an older schema than frlake writes today."""
        from frlake.schema import SCHEMA_VERSIONS

        older = or_(*[(LakeFile.table_name == t) & (LakeFile.schema_version < v) for t, v in SCHEMA_VERSIONS.items()])
        q = (select(LakeFile.table_name, LakeFile.job, LakeFile.attempt).distinct()
             .where(LakeFile.status.in_(VISIBLE), older))
        return self._of_partitions(q, partitions)

    def _of_partitions(self, q, partitions: Iterable[tuple[str, int]] | None) -> list[tuple]:
        """The rows of ``q`` (table, job, attempt, ...), of ``partitions`` only when given (a WHERE of their
        keys, a chunk at a time: an ingest asks about the attempts it touched, whatever the lake holds),
        in partition order."""
        with self.session() as s:
            if partitions is None:
                rows = [tuple(r) for r in s.execute(q)]
            else:
                rows = [tuple(r) for r in _in_partitions(s, q, partitions, lambda r: (r[1], r[2]))]
        return sorted(rows, key=partition_order)

    # -- retired files ----------------------------------------------------------
    def expired_retired(self, before: datetime, limit: int = 10_000) -> list[Retired]:
        with self.session() as s:
            return [Retired(*r) for r in s.execute(
                select(RetiredFile.id, RetiredFile.path, RetiredFile.kind, RetiredFile.sha256)
                .where(RetiredFile.retired_at <= before).order_by(RetiredFile.id).limit(limit))]

    def drop_retired(self, ids: Sequence[int]) -> None:
        with self.session(write=True) as s:
            for chunk in chunks(list(ids)):
                s.execute(delete(RetiredFile).where(RetiredFile.id.in_(chunk)))

    def referenced_shas(self, shas: Sequence[str]) -> set[str]:
        """The sha256s among ``shas`` that some dump still refers to."""
        found: set[str] = set()
        with self.session() as s:
            for chunk in chunks(sorted(set(shas))):
                found.update(s.scalars(select(Dump.sha256).where(Dump.sha256.in_(chunk)).distinct()))
        return found

    def retired_count(self) -> int:
        with self.session() as s:
            return s.scalar(select(func.count(RetiredFile.id))) or 0


def mark_publishing(s: Session, ids: Sequence[int]) -> None:
    """In a commit's transaction: the pending files become visible (at their hidden names)."""
    for chunk in chunks(list(ids)):
        s.execute(update(LakeFile).where(LakeFile.id.in_(chunk)).values(status="publishing"))


def retire(s: Session, files: Sequence[CommittedFile], now: datetime) -> None:
    """In a transaction: these files leave every view. Their final names
    go at once (the writer's next sweep: outside readers stop seeing them
    with the switch), their hidden names after the grace period (frlake
    readers that opened views before may still read them)."""
    if not files:
        return
    for chunk in chunks([f.id for f in files]):
        s.execute(delete(LakeFile).where(LakeFile.id.in_(chunk)))
    rows = [{"path": f.readable, "kind": "parquet", "sha256": None, "retired_at": now} for f in files]
    rows += [{"path": f.path, "kind": "parquet", "sha256": None, "retired_at": _AT_ONCE}
             for f in files if f.hidden and f.status == "committed"]
    s.execute(insert(RetiredFile), rows)


def switch(s: Session, new_ids: Sequence[int], old: Sequence[CommittedFile], now: datetime | None = None) -> None:
    """In a transaction: the new files become visible and the old ones are retired, together."""
    mark_publishing(s, new_ids)
    retire(s, old, now or utcnow())
