"""The one object a frlake user holds: ``Frlake``.

It is opened from :class:`~frlake.config.Settings` (or ``Frlake.open(lake=...,
db_url=...)``), owns one catalog engine, the lake folder and the DuckDB
connections it hands out, and closes them. Everything a user does goes
through it: the CLI opens one per command, the server one per process, and
Python users hold one::

    with frlake.Frlake.open("frlake-lake") as fl:
        fl.ingest(["/nfs/fr"])
        print(fl.diagnose("job-7").summary)

Orchestration lives here: ingest only ingests and diagnosis only analyses;
the session decides what to diagnose after an ingest, what to read for it,
and where the result is stored.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from dataclasses import replace
from itertools import chain
from pathlib import Path
from typing import TYPE_CHECKING

from frlake.config import Settings
from frlake.entities import Brief, Diagnosis, Timeline
from frlake.errors import DumpRejected, FrlakeError
from frlake.storage.lake import Lake

if TYPE_CHECKING:  # DuckDB is imported by what reads the lake: a command that reads the catalog only needs none
    import duckdb

    from frlake.catalog.notify import DestinationStatus
    from frlake.catalog.quick import QuickReads
    from frlake.catalog.rows import AttemptRow
    from frlake.catalog.stats import LakeStats
    from frlake.catalog.store import Catalog
    from frlake.diagnose.standing import StackGroup
    from frlake.notify.outbox import Notifier
    from frlake.query.attempt import Arrivals, GroupProgress
    from frlake.query.causes import Cause
    from frlake.query.history import Facets, HostHistory, JobHistory
    from frlake.query.side_by_side import SideBySide
    from frlake.values import ReportRows

log = logging.getLogger("frlake")
# DuckDB's memory for one diagnosis; beyond it, its temporary tables spill to disk. With Python and the
# catalog this keeps a 16,384-rank diagnosis under 1 GB (bench/bench_scale.py).
ANALYSIS_MEMORY = "700MB"
MEMO_ENTRIES = 128  # values a long-lived session keeps per catalog version (memoized)
# Attempts of at most BATCH_DUMPS dumps are diagnosed BATCH_ATTEMPTS at a time on one connection, their rows
# (at most about BATCH_BYTES of Parquet files) held in memory (Frlake._diagnose_all, frlake.query.batch).
BATCH_DUMPS = 64
BATCH_ATTEMPTS = 128
BATCH_BYTES = 32 << 20
# With several workers, small attempts go in about WORKER_BATCHES batches per worker (so that they finish
# together), of at least MIN_WORKER_BATCH attempts (a batch's set-up is paid once per batch).
WORKER_BATCHES = 4
MIN_WORKER_BATCH = 16


class NoLake(FrlakeError):
    """A read command found no lake where it was told to look."""


class Frlake:
    """A session over one lake and its catalog (see the module docstring)."""

    def __init__(self, settings: Settings, *, must_exist: bool = False):
        if must_exist and not _lake_exists(settings):
            raise NoLake(f"there is no frlake lake at {settings.lake}; check --lake (or FRLAKE_LAKE), "
                         f"or ingest dumps there first")
        self.settings = settings
        self.lake = Lake(settings.lake)
        self._catalog: Catalog | None = None
        self._connections: list[duckdb.DuckDBPyConnection] = []
        self._per_thread = None  # the readers' connections, one per thread (views)
        self._memo = None  # values computed once per catalog version (memoized)
        self._sandboxes: dict = {}  # users' SQL: one sandbox per thread and limits (thread_sandbox)
        self._migrations = None
        self._quick: QuickReads | None | bool = None  # False: catalog.quick cannot answer here
        self.closed = False

    @classmethod
    def open(cls, lake: str | os.PathLike | None = None, db_url: str | None = None, *,
             must_exist: bool = False) -> Frlake:
        """Open the lake folder ``lake`` with the catalog ``db_url`` (defaults:
        FRLAKE_LAKE / FRLAKE_DB_URL, then ``./frlake-lake`` and SQLite in it).
        ``must_exist``: refuse, instead of creating, a lake that is not there."""
        return cls(Settings.resolve(lake, db_url), must_exist=must_exist)

    @property
    def catalog(self) -> Catalog:
        """The catalog, opened (and created or checked) on first use."""
        if self.closed:
            raise FrlakeError("this frlake session is closed")
        if self._catalog is None:
            from frlake.catalog.store import Catalog

            self._catalog = Catalog(self.settings.db_url)
        return self._catalog

    def _quick_reads(self) -> QuickReads | None:
        """catalog.quick's reads of an SQLite catalog at this frlake's revision, while the catalog itself
        is not open (a command that shows what is stored need not import SQLAlchemy); else None."""
        if self._quick is None:
            from frlake.catalog.quick import QuickReads
            from frlake.catalog.revisions import head_revision

            self._quick = (self._catalog is None and not self.closed
                           and QuickReads.open(self.settings.db_url, head_revision())) or False
        return self._quick or None

    def _ask_quick(self, question):
        """``question(quick)`` answered by :meth:`_quick_reads`, or None when it cannot answer: not there,
        or an SQLite error (the full path then meets it and says what is wrong)."""
        import sqlite3

        if (quick := self._quick_reads()) is None:
            return None
        try:
            return question(quick)
        except sqlite3.Error:
            return None

    @property
    def migrations(self):
        """The catalog's schema migrations (:class:`frlake.catalog.db.Migrations`), which work whatever the
        catalog's revision; closed with the session."""
        if self._migrations is None:
            from frlake.catalog.db import Migrations

            self._migrations = Migrations(self.settings.db_url)
        return self._migrations

    def close(self) -> None:
        if self._quick:
            self._quick.close()
        self._quick = False
        if self._migrations is not None:
            self._migrations.close()
            self._migrations = None
        for con in self._connections:
            con.close()
        self._connections.clear()
        if self._per_thread is not None:
            self._per_thread.close()
        for sandboxes in self._sandboxes.values():
            sandboxes.close()
        self._sandboxes.clear()
        if self._catalog is not None:
            self._catalog.close()
            self._catalog = None
        self.closed = True

    def __enter__(self) -> Frlake:
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    # -- SQL ------------------------------------------------------------------
    def connect(self, *, catalog_views: Iterable[str] | None = None,
                partition: tuple[str, int] | None = None) -> duckdb.DuckDBPyConnection:
        """A trusted DuckDB connection with the views of docs/schema.md (closed
        with the session, or earlier by the caller)."""
        from frlake.query.connect import connect

        con = connect(self.catalog, self.lake, catalog_views=catalog_views, partition=partition)
        self._connections.append(con)
        return con

    @contextmanager
    def _connection(self, *, bounded: bool = False, **kwargs) -> Iterator[duckdb.DuckDBPyConnection]:
        """A connection for one piece of frlake's own work. ``bounded``: at
        most ``ANALYSIS_MEMORY`` of DuckDB memory, the rest spilled to a
        private temporary folder (a 16,384-rank attempt holds 16M entries)."""
        import shutil
        import tempfile

        from frlake.query.connect import connect

        con = connect(self.catalog, self.lake, **kwargs)
        spill = None
        try:
            if bounded:
                spill = tempfile.mkdtemp(prefix="frlake-duckdb-")
                con.execute(f"SET memory_limit = '{ANALYSIS_MEMORY}'")
                con.execute("SET temp_directory = " + "'" + spill.replace("'", "''") + "'")
            yield con
        finally:
            con.close()
            if spill is not None:
                shutil.rmtree(spill, ignore_errors=True)

    # -- what a long-lived reader (the server) keeps per thread and per catalog version ----------------------
    def catalog_version(self) -> tuple:
        """Changes whenever the lake's committed files or the stored diagnoses do (:meth:`Catalog.version`)."""
        return self.catalog.version()

    def views(self, version: tuple | None = None) -> duckdb.DuckDBPyConnection:
        """This thread's trusted connection with the lake's views, the same one while the catalog's version
        is ``version`` (read now when not given); closed with the session."""
        if self._per_thread is None:
            from frlake.query.connect import connect
            from frlake.query.per_thread import ThreadConnections

            self._per_thread = ThreadConnections(lambda: connect(self.catalog, self.lake))
        return self._per_thread.get(self.catalog_version() if version is None else version)

    def thread_sandbox(self, limits, version: tuple | None = None):
        """This thread's :class:`~frlake.query.Sandbox` for users' SQL under ``limits``, the same one while
        the catalog's version is ``version`` and no query changed its views (it then closes itself); closed
        with the session. Each query runs on its own cursor: nothing one leaves behind reaches the next."""
        if limits not in self._sandboxes:
            from frlake.query.per_thread import ThreadConnections

            self._sandboxes[limits] = ThreadConnections(lambda: self.sandbox(limits))
        return self._sandboxes[limits].get(self.catalog_version() if version is None else version)

    def memoized(self, name: str, args: tuple, compute, version: tuple | None = None):
        """``compute()``, or what it gave for the same ``name`` and ``args`` at this catalog version (the
        newest 128 kept)."""
        if self._memo is None:
            from frlake.query.per_thread import VersionedMemo

            self._memo = VersionedMemo(MEMO_ENTRIES)
        return self._memo.get(self.catalog_version() if version is None else version, (name, args), compute)

    def list_attempts(self, **filters) -> tuple[int, list[AttemptRow]]:
        """The attempts that match ``filters`` (catalog.attempts.page): how many, and one page of them."""
        if filters.keys() == {"job", "limit"} and filters["limit"] and (found := self._ask_quick(
                lambda q: (q.count_attempts(filters["job"]), q.attempts_of(filters["job"], filters["limit"])))):
            return found
        return self.catalog.attempts.page(**filters)

    def attempt_facets(self, **filters) -> Facets:
        """The counts by verdict, host and root-cause reason of the attempts that match ``filters``."""
        from frlake.query.history import Facets

        counts = self.catalog.attempts.facets(**filters)
        return Facets(**{name: tuple(pairs) for name, pairs in counts.items()})

    def attempt_keys(self, job: str | None = None) -> list[tuple[str, int]]:
        return self.catalog.attempts.keys(job)

    def files(self, status: str | None = None, limit: int | None = None) -> list:
        """The files seen, by path (ingested, duplicate, or rejected and why): catalog.files.records."""
        return self.catalog.files.records(status=status, limit=limit)

    def has_attempt(self, job: str, attempt: int) -> bool:
        return self.catalog.attempts.exists(job, attempt)

    def job_history(self, job: str, con: duckdb.DuckDBPyConnection | None = None) -> JobHistory:
        """A job's attempts over time and who came back (frlake.query.history)."""
        from frlake.query.history import job_history

        return job_history(con or self.views(), self.catalog, job)

    def host_history(self, host: str, con: duckdb.DuckDBPyConnection | None = None) -> HostHistory | None:
        """A host's attempts, the diagnoses that name it and its weeks; None for a host never seen."""
        from frlake.query.history import host_history

        return host_history(con or self.views(), self.catalog, host)

    def sandbox(self, limits=None, *, partition: tuple[str, int] | None = None, views=None,
                single_use: bool = False):
        """A :class:`~frlake.query.Sandbox` for untrusted SQL (the caller closes it); ``partition``: its
        lake views see that attempt's files only; ``views``: only these views are made (None: every one),
        and none opens the catalog; ``single_use``: closed after one query."""
        from frlake.query.connect import open_sandbox
        from frlake.query.sandbox import QueryLimits

        catalog = self.catalog if views is None or views else None
        return open_sandbox(catalog, self.lake, limits or QueryLimits(), partition=partition, views=views,
                            single_use=single_use)

    def query(self, sql: str, limits=None):
        """Run one untrusted, read-only statement with limits (time, memory,
        rows, bytes); a :class:`~frlake.query.QueryResult`. Only the views the statement names are made
        (:func:`~frlake.query.statements.views_read`), and a statement that reads one attempt of one
        view (:func:`~frlake.query.connect.one_attempt`) reads that attempt's files only."""
        from frlake.query.connect import one_attempt
        from frlake.query.names import ALL_VIEW_NAMES
        from frlake.query.statements import check_statement, views_read

        check_statement(sql)  # before anything is opened; parsed once (statements.syntax_text)
        with self.sandbox(limits, partition=one_attempt(sql), views=views_read(sql, ALL_VIEW_NAMES),
                          single_use=True) as sandbox:
            return sandbox.run(sql)

    # -- ingest -----------------------------------------------------------------
    def ingest(self, paths: Iterable[str | Path] = (), options=None, progress=None, *,
               sources: Iterable = (), keep_file_list: bool = False, only: Iterable[str] | None = None):
        """Ingest files, folders and archives (and ``sources`` that carry their
        bytes or live elsewhere, such as uploads), then diagnose every attempt
        whose diagnosis is pending: the ones this run touched, and any that an
        interrupted run committed but never diagnosed.

        ``progress`` is called with a :class:`~frlake.ingest.pipeline.Step` as each phase goes (scanning,
        reading, compacting, diagnosing); the summary's ``seconds`` is the whole run and ``phases`` each
        phase's. ``only``: the files under ``paths`` to look at (a watch's changes: ``paths`` are not walked).
        """
        import time

        from frlake.ingest.pipeline import IngestOptions, Step, ingest

        started = time.perf_counter()
        options = options or IngestOptions()
        if options.workers > 1 or options.isolate:
            from frlake.ingest.pool import pool_context

            pool_context()  # the workers' forkserver imports frlake while this process opens the catalog
        summary = ingest(self.catalog, self.lake, paths, options, progress, keep_file_list=keep_file_list,
                         sources=sources, only=only)
        log.info("run %d: %d ingested, %d already present, %d unchanged, %d rejected", summary.run_id,
                 summary.ingested, summary.already_present, summary.unchanged, summary.rejected)
        if options.compact_min_files and summary.touched:
            from frlake.storage.compact import CompactOptions

            phase = time.perf_counter()
            if progress:
                progress(Step("compacting", 0, len(summary.touched) + 1))
            # Only the attempts this run touched, and the stacks: the cost does not grow with the lake.
            done = self.compact([*summary.touched, (None, None)], CompactOptions(
                min_files=options.compact_min_files, lock_timeout_s=options.lock_timeout_s,
                retire_grace_s=options.retire_grace_s))
            summary.compacted = done.files_before
            summary.phases["compacting"] = round(time.perf_counter() - phase, 3)
        if options.diagnose:
            phase = time.perf_counter()
            told = (lambda i, n: progress(Step("diagnosing", i, n))) if progress else None
            # one process: diagnosis workers pay at a few hundred attempts and cost more than they give at
            # thousands (bench/README.md, "Many small attempts"); rediagnose --workers offers them
            summary.diagnosed = [Brief.of(d) for d in self._diagnose_all(self.catalog.diagnoses.pending(), told)]
            summary.phases["diagnosing"] = round(time.perf_counter() - phase, 3)
        summary.seconds = round(time.perf_counter() - started, 3)
        return summary

    # -- lifecycle ---------------------------------------------------------------
    def forget(self, selector=None, options=None, **where):
        """Forget dumps (a :class:`~frlake.storage.forget_plan.ForgetSelector`,
        or ``job=``, ``attempt=``, ``path=``, ``before=``): their rows in every
        table, their diagnoses and records, and the raw bytes no other dump
        refers to; then rediagnose the attempts that keep some dumps. A
        :class:`~frlake.storage.forget.ForgetSummary`."""
        from frlake.storage.forget import ForgetOptions, forget
        from frlake.storage.forget_plan import ForgetSelector

        options = options or ForgetOptions()
        summary = forget(self.catalog, self.lake, selector or ForgetSelector(**where), options)
        if not options.dry_run:
            self.diagnose_pending()
        return summary

    def compact(self, partitions=None, options=None):
        """Merge small Parquet files (of every partition, or of the given
        (job, attempt) ``partitions``; (None, None) is ``stacks``). A
        :class:`~frlake.storage.compact.CompactSummary`."""
        from frlake.storage.compact import CompactOptions, compact

        return compact(self.catalog, self.lake, partitions, options or CompactOptions())

    def ingest_upload(self, files: Iterable[tuple[str, object]], options=None, limits=None, budget=None):
        """Save uploaded files (name, bytes or binary stream) in a private
        folder of the lake, check them whole (:class:`~frlake.ingest.upload.Upload`),
        ingest them, and remove the folder whatever happens."""
        import io

        from frlake.ingest.pipeline import IngestOptions
        from frlake.ingest.upload import Upload, UploadLimits

        options = options or IngestOptions(workers=1, isolate=True)
        limits = limits or UploadLimits()
        # a file larger than a worker may read is refused as it arrives, not saved first
        cap = options.limits.resolved(max(1, options.workers)).max_file_bytes
        limits = replace(limits, max_member_bytes=min(limits.max_member_bytes, cap))
        with Upload(self.lake.root, options.identity, limits, budget) as upload:
            for name, data in files:
                upload.add(name, io.BytesIO(data) if isinstance(data, (bytes, bytearray)) else data)
            return self.ingest(options=options, sources=upload.ready_sources(), keep_file_list=True)

    # -- diagnose ---------------------------------------------------------------
    def diagnose(self, job: str, attempt: int | None = None, *, store: bool = True,
                 complete: bool | None = None, reuse: bool = False) -> Diagnosis:
        """Diagnose one attempt of a job (default: its latest) and, with
        ``store``, keep the result in the catalog. ``store=False`` computes
        without writing anything (what a web page uses). ``complete=True``
        says no more dumps of it will come (see :meth:`mark_complete`).

        ``reuse``: the stored diagnosis, read and not computed again, when it
        is current (:meth:`current_diagnosis`), which is what computing it
        again would give; else as without it."""
        if reuse and complete is None and (stored := self._ask_quick(
                lambda q: q.current_diagnosis(job, q.latest_attempt(job) if attempt is None else attempt))):
            return stored
        attempt = self._attempt_number(job, attempt)
        if reuse and (current := self.current_diagnosis(job, attempt, complete)) is not None:
            return current
        if not store:
            return self._analyse(job, attempt, complete)[0]
        with self._summary_writer() as writer:
            return self._diagnose_one(writer, job, attempt, complete, resummarise=False)

    def timeline(self, job: str, attempt: int) -> Timeline:
        """When the attempt's newest dump file was written (its mtime), its newest dump ingested, its
        diagnosis made and a receiver last took its alert (each None where it has not happened)."""
        from datetime import UTC, datetime

        mtime_ns, ingested = self.catalog.dumps.arrival(job, attempt)

        def utc(at):
            return None if at is None else (at if at.tzinfo else at.replace(tzinfo=UTC))

        return Timeline(None if mtime_ns is None else datetime.fromtimestamp(mtime_ns / 1e9, UTC), utc(ingested),
                        utc(self.catalog.diagnoses.diagnosed_at(job, attempt)),
                        utc(self.catalog.notify.sent_at(job, attempt)))

    def mark_complete(self, job: str, attempt: int) -> Diagnosis:
        """Say that no more dumps of this attempt will come: an attempt that
        was "incomplete, waiting for more dumps" is diagnosed with the dumps
        there are (its ranks without a dump may then be named as roots). The
        mark is kept with the stored diagnosis, and every later diagnosis of
        the attempt (more dumps, rediagnose) keeps it."""
        return self.diagnose(job, attempt, complete=True)

    def rediagnose(self, job: str | None = None, *, batch: int = BATCH_ATTEMPTS, workers: int = 1) -> list[Diagnosis]:
        """Recompute and store the diagnosis of every attempt (of ``job``),
        and its summary tables; small attempts ``batch`` at a time on one
        connection (1: each on its own, as before; the same diagnoses), their
        batches diagnosed by ``workers`` processes (stored by this one, in the
        same order: the same diagnoses)."""
        if workers < 1:
            raise FrlakeError(f"workers must be at least 1, not {workers}")
        keys = self.catalog.attempts.keys(job)
        if job is not None and not keys:
            raise FrlakeError(f"the lake has no dumps of job {job!r}")
        return self._diagnose_all(keys, batch=batch, workers=workers)

    def attach_hosts(self, path: str | Path, job: str, attempt: int | None = None,
                     kind: str | None = None) -> tuple[str, list[Diagnosis]]:
        """Attach the host map at ``path`` (:meth:`attach_host_map`)."""
        from frlake.ingest import hostmaps
        from frlake.ingest.sources import read_regular_file

        try:
            data = read_regular_file(str(path), hostmaps.MAX_BYTES)
        except DumpRejected as exc:
            raise FrlakeError(f"{path}: {exc.message}") from None
        return self.attach_host_map(str(Path(path).absolute()), data, job, attempt, kind)

    def attach_host_map(self, name: str, data: bytes, job: str, attempt: int | None = None,
                        kind: str | None = None) -> tuple[str, list[Diagnosis]]:
        """Attach a host map (any of frlake.ingest.hostmaps' kinds, by its ``name`` or ``kind``) to an attempt
        of the lake, or every attempt of ``job``, without reading a dump again: the hosts its dumps do not name
        are taken from it, and the attempts are diagnosed again. Its id (the same map on the same attempts
        has the same: attaching it twice is once) and the diagnoses; ``detach_hosts`` undoes it."""
        import hashlib

        from frlake.ingest import hostmaps

        try:
            found = hostmaps.read(name, data, kind or hostmaps.kind_of(name) or "table")
        except DumpRejected as exc:
            raise FrlakeError(f"{name}: {exc.message}") from None
        if not found.hosts:
            raise FrlakeError(f"{name}: the {found.kind} host map names no rank's host")
        if attempt is None and not self.catalog.attempts.keys(job):
            raise FrlakeError(f"the lake has no dumps of job {job!r}")
        if attempt is not None:
            self._attempt_number(job, attempt)
        digest = hashlib.sha256(data + f"\0{job}\0{attempt}\0{found.kind}".encode()).hexdigest()[:16]
        attempts = self.catalog.dumps.attach_hosts(job, attempt, found.hosts, name, digest)
        return digest, [self.diagnose(j, a) for j, a in attempts]

    def detach_hosts(self, attach_id: str) -> list[Diagnosis]:
        """Undo one ``attach_hosts``: its claims go, and the attempts it was on are diagnosed again."""
        attempts = self.catalog.dumps.detach_hosts(attach_id)
        if not attempts:
            raise FrlakeError(f"no host map is attached with id {attach_id!r} (frlake hosts list shows them)")
        return [self.diagnose(j, a) for j, a in attempts]

    def diagnose_pending(self) -> list[Diagnosis]:
        """Diagnose the attempts whose stored diagnosis is missing or older
        than their dumps."""
        return self._diagnose_all(self.catalog.diagnoses.pending())

    def current_diagnosis(self, job: str, attempt: int, complete: bool | None = None) -> Diagnosis | None:
        """The stored diagnosis of the attempt if it is current, else None. Current: made from the dumps the
        attempt holds now (its diagnosis is not due: no dump came or went since), by this frlake's algorithm
        (ALGORITHM_VERSION), and, when ``complete`` is given, with that mark. A diagnosis is a function of
        exactly these (the same input gives the same answer), so it is what computing it again would give."""
        from frlake.entities import ALGORITHM_VERSION

        state = self.catalog.diagnoses.state(job, attempt)
        if state is None or state[1]:
            return None
        stored = self.catalog.diagnoses.get(job, attempt)
        if stored is None or stored.algorithm_version != ALGORITHM_VERSION:
            return None
        if complete is not None and stored.complete != complete:
            return None
        return stored

    def stored_diagnosis(self, job: str, attempt: int) -> Diagnosis:
        """The stored diagnosis, or one computed now and not stored (a read
        never writes)."""
        self._attempt_number(job, attempt)
        return self.catalog.diagnoses.get(job, attempt) or self._analyse(job, attempt, None)[0]

    def _diagnose_all(self, keys: Iterable[tuple[str, int]], progress=None, *,
                      batch: int = BATCH_ATTEMPTS, workers: int = 1) -> list[Diagnosis]:
        """Diagnose and store these attempts; ``progress(done, total)`` after each. Attempts of at most
        ``BATCH_DUMPS`` dumps go in batches of up to ``batch`` attempts (``BATCH_BYTES`` of files) on one
        connection, stored together (frlake.query.batch), each batch on a thread of its own while the next
        one is diagnosed (_StoredBehind); the others, and every one with ``batch`` 1, one at a time. Either
        way each gets the same diagnosis. With ``workers`` > 1 and small attempts enough for two batches a
        worker, the batches (smaller, so that the work spreads evenly) are diagnosed by
        worker processes and stored here, in order (_diagnose_in_workers)."""
        keys = list(keys)
        if not keys:
            return []
        # one read for these attempts (a user's mark is never lost), none when nothing is pending
        complete = self.catalog.diagnoses.marked_complete(keys)
        states = self.catalog.diagnoses.states(keys)  # read before the views: never newer than they
        small = [k for k in keys if batch > 1 and k in states and 0 < states[k][3] <= BATCH_DUMPS]
        done: dict[tuple[str, int], Diagnosis] = {}

        def told(key: tuple[str, int], diag: Diagnosis) -> None:
            log.info("%s", diag.summary)
            done[key] = diag
            if progress:
                progress(len(done), len(keys))

        if progress:
            progress(0, len(keys))
        least = min(batch, MIN_WORKER_BATCH)
        spread = workers > 1 and len(small) >= 2 * workers * least
        if spread:  # a few batches per worker, each of at least MIN_WORKER_BATCH attempts (or ``batch``)
            batch = max(least, min(batch, -(-len(small) // (WORKER_BATCHES * workers))))

        def stored(made: list) -> None:
            for diag, _, _ in made:
                told((diag.job, diag.attempt), diag)

        with self._summary_writer() as writer:
            with _StoredBehind(writer.store_many, stored) as store:  # each batch stored while the next is made
                parts: Iterator[tuple[list, list]] = self._batches(small, batch)
                if spread:  # what the workers left (one died) is diagnosed here
                    parts = chain(self._diagnose_in_workers(store, parts, complete, states, workers), parts)
                for part in parts:
                    store(self._batch_diagnoses(part, complete, states))
            for job, attempt in keys:
                if (job, attempt) not in done:
                    told((job, attempt), self._diagnose_one(writer, job, attempt, (job, attempt) in complete,
                                                            resummarise=True))
        return [done[k] for k in keys]

    def _batches(self, keys: list[tuple[str, int]], size: int) -> Iterator[tuple[list, list]]:
        """(attempts, their committed files and the lake's unpartitioned ones) in batches of at most
        ``size`` attempts and about ``BATCH_BYTES`` of files (an attempt larger than that goes alone)."""
        from frlake.storage.files import LakeFiles

        for start in range(0, len(keys), size):
            group = keys[start:start + size]
            files = LakeFiles(self.catalog).committed_in(group, unpartitioned=True)
            shared = [f for f in files if f.job is None]
            by_key: dict[tuple[str, int], list] = {}
            for f in files:
                if f.job is not None:
                    by_key.setdefault((f.job, f.attempt), []).append(f)
            part, size_of = [], 0
            for key in group:
                own = sum(f.bytes for f in by_key.get(key, ()))
                if part and size_of + own > BATCH_BYTES:
                    yield part, _by_id(shared, by_key, part)
                    part, size_of = [], 0
                part.append(key)
                size_of += own
            if part:
                yield part, _by_id(shared, by_key, part)

    def _diagnose_in_workers(self, store, parts: Iterator[tuple[list, list]], complete: set, states: dict,
                             workers: int) -> list[tuple[list, list]]:
        """Batches from ``parts`` diagnosed by ``workers`` processes (from ingest's forkserver: they hold
        nothing of this process) and stored here in the order they come, as one process stores them; at
        most ``2 * workers`` batches in flight, so memory stays bounded whatever the number of attempts.
        Workers only read: if one dies, nothing of its batches was stored, and the batches taken from
        ``parts`` and not stored yet are returned, in order, for this process to diagnose."""
        from collections import deque
        from concurrent.futures import ProcessPoolExecutor
        from concurrent.futures.process import BrokenProcessPool

        from frlake.ingest.pool import pool_context

        in_flight: deque = deque()  # [future, batch], oldest first (the future None until submitted)
        with ProcessPoolExecutor(max_workers=workers, mp_context=pool_context()) as pool:
            try:
                while True:
                    while len(in_flight) < 2 * workers and (part := next(parts, None)) is not None:
                        in_flight.append([None, part])
                        in_flight[-1][0] = pool.submit(_diagnose_batch_in_worker, self.settings, part,
                                                       {k for k in part[0] if k in complete},
                                                       {k: states[k] for k in part[0]})
                    if not in_flight:
                        return []
                    made = in_flight[0][0].result()
                    in_flight.popleft()
                    store(made)
            except BrokenProcessPool:
                pass
            finally:
                for future, _ in in_flight:
                    if future is not None:
                        future.cancel()
        lost = [part for _, part in in_flight]
        log.warning("a diagnosis worker died; this process diagnoses the %d batches it left", len(lost))
        return lost

    def _batch_diagnoses(self, batch: tuple[list, list], complete: set, states: dict) -> list:
        """A batch's (diagnosis, revision, summary) of each attempt, what ``SummaryWriter.store_many`` stores."""
        from frlake.diagnose.analyze import diagnose_attempt
        from frlake.diagnose.batched import BatchRelations
        from frlake.diagnose.evidence import BatchReads
        from frlake.query.batch import AttemptBatch
        from frlake.query.links import BatchSummaries
        from frlake.storage.summary_tables import AttemptSummary

        keys, files = batch
        made = []
        with self._connection(catalog_views=(), files=files, derived=(), bounded=True) as con:
            # one thread: a small attempt's statements run on a few thousand rows, where a second thread
            # costs more CPU to start and join than it saves (10% of the batch's CPU)
            con.execute("SET threads = 1")
            held, summaries = AttemptBatch(con, files), BatchSummaries(con)
            reads = BatchReads.read(con)
            together = BatchRelations(con, reads, [key for key in keys if held.signed(key)])
            sources = self.catalog.dumps.host_sources(keys)
            for job, attempt in keys:
                revision, _, copies, _ = states[(job, attempt)]
                claimed = self.catalog.dumps.claimed_twice(job, attempt) if copies else {}
                held.select(job, attempt)
                alone = not reads.holds((job, attempt))  # else its relations are the batch's, kept below
                if alone:
                    held.hold_entries()
                claims, failures = sources.get((job, attempt), ([], []))
                diag = diagnose_attempt(con, job, attempt, complete=(job, attempt) in complete, durations=True,
                                        claimed=claimed, batch=reads, host_claims=claims, failures=failures)
                if alone:
                    summaries.keep(job, attempt)
                made.append((diag, revision))
            summaries.keep_batch(together.entries, together.dumps, together.keys)
            rows = summaries.tables(keys)
        return [(diag, revision, AttemptSummary(rows[(diag.job, diag.attempt)], (diag.job, diag.attempt) in held.summarised))
                for diag, revision in made]

    def _summary_writer(self):
        from frlake.storage.summary_tables import SummaryWriter

        return SummaryWriter(self.catalog, self.lake)

    def _diagnose_one(self, writer, job: str, attempt: int, complete: bool | None, *,
                      resummarise: bool) -> Diagnosis:
        """Diagnose one attempt and store the diagnosis with the attempt's
        summary tables (frlake.storage.summary_tables), both made from the same views.
        Without ``resummarise``, an attempt whose diagnosis is not due keeps
        its summaries: they are those of the revision it is still at (at
        16,384 ranks they cost as much again as the diagnosis)."""
        # read before the views: never newer than they
        revision, due, copies = self.catalog.diagnoses.state(job, attempt) or (0, True, True)
        diag, summaries = self._analyse(job, attempt, complete, summarise=due or resummarise, copies=copies)
        writer.store(diag, revision, summaries)  # no summaries: the stored ones stay
        return diag

    def _analyse(self, job: str, attempt: int, complete: bool | None, *,
                 summarise: bool = False, copies: bool = True) -> tuple[Diagnosis, object]:
        """The diagnosis, and with ``summarise`` the attempt's
        :class:`~frlake.storage.summary_tables.AttemptSummary` (else None). Each
        attempt is read through views over its own files only, so a diagnosis
        costs the same however long the history is. ``complete`` None: as the
        stored diagnosis says (a user's mark is never lost). ``copies`` False: the caller knows that no file
        holds a copy of the attempt's dumps in another place (catalog.diagnoses.state)."""
        from frlake.diagnose.analyze import diagnose_attempt
        from frlake.query.links import holds_summary
        from frlake.query.links import summary_tables as summary_rows
        from frlake.storage.summary_tables import AttemptSummary

        if complete is None:  # the stored report is read only if it holds the mark
            complete = (job, attempt) in self.catalog.diagnoses.marked_complete([(job, attempt)])
        claimed = self.catalog.dumps.claimed_twice(job, attempt) if copies else {}
        claims, failures = self.catalog.dumps.host_sources([(job, attempt)]).get((job, attempt), ([], []))
        # no derived view: a diagnosis reads none (views.create_views: each costs its binding)
        with self._connection(catalog_views=(), partition=(job, attempt), derived=(), bounded=True) as con:
            diag = diagnose_attempt(con, job, attempt, complete=complete, durations=summarise, claimed=claimed,
                                    host_claims=claims, failures=failures)
            if not summarise:
                return diag, None
            had = holds_summary(con, job, attempt)
            return diag, AttemptSummary(summary_rows(con), had)

    def _attempt_number(self, job: str, attempt: int | None) -> int:
        if attempt is None:
            numbers = [a for _, a in self.catalog.attempts.keys(job)]
            if not numbers:
                raise FrlakeError(f"the lake has no dumps of job {job!r}")
            return max(numbers)
        if not self.catalog.attempts.exists(job, attempt):
            raise FrlakeError(f"the lake has no dumps of job {job!r} attempt {attempt}")
        return attempt

    # -- one attempt, closely ---------------------------------------------------
    def entries(self, job: str, attempt: int | None = None, flt=None) -> SideBySide:
        """The attempt's collectives with the chosen ranks side by side
        (torch's ``fr_trace -j``, ``--selected-ranks``, ``--pg-filters``); by
        default every rank of a small attempt, else the culprits of the stored
        diagnosis and the ranks nearest them."""
        from frlake.query.side_by_side import EntryFilter, side_by_side

        attempt = self._attempt_number(job, attempt)
        diagnosis = self.catalog.diagnoses.get(job, attempt)  # its culprits centre a large attempt's view
        with self._connection(catalog_views=(), partition=(job, attempt)) as con:
            return side_by_side(con, job, attempt, flt or EntryFilter(), diagnosis=diagnosis)

    def stack_diff(self, job: str, attempt: int | None = None) -> tuple[StackGroup, ...]:
        """Where each rank stands, grouped by stack: the ranks at another frame than the rest."""
        from frlake.diagnose.standing import stack_diff

        attempt = self._attempt_number(job, attempt)
        with self._connection(catalog_views=(), partition=(job, attempt)) as con:
            return stack_diff(con, job, attempt)

    @contextmanager
    def _attempt_connection(self, job: str, attempt: int, con: duckdb.DuckDBPyConnection | None):
        """``con`` when the caller has one with the lake's views (the server keeps one per thread: views cost
        a catalog read per table), else a connection over this attempt's own files."""
        if con is not None:
            yield con
            return
        with self._connection(catalog_views=(), partition=(job, attempt)) as own:
            yield own

    def progress(self, job: str, attempt: int | None = None, pgs=None, *,
                 con: duckdb.DuckDBPyConnection | None = None) -> tuple[GroupProgress, ...]:
        """Per process group (all, or ``pgs``) and rank: the last sequence id
        enqueued, started and completed (:func:`frlake.query.attempt.progress`)."""
        from frlake.query.attempt import progress

        attempt = self._attempt_number(job, attempt)
        with self._attempt_connection(job, attempt, con) as c:
            return progress(c, job, attempt, pgs)

    def arrivals(self, job: str, attempt: int | None = None, window=None, *, diagnosis: Diagnosis | None = None,
                 con: duckdb.DuckDBPyConnection | None = None) -> Arrivals:
        """Who arrived late or never at a window of one group's collectives
        (:class:`frlake.query.attempt.ArrivalsWindow`; by default the last 40 of
        the root culprit's group), centred on the stored diagnosis' culprits
        and the ranks waiting for them."""
        from frlake.query.attempt import ArrivalsWindow, arrivals

        attempt = self._attempt_number(job, attempt)
        diag = diagnosis or self.stored_diagnosis(job, attempt)
        with self._attempt_connection(job, attempt, con) as c:
            return arrivals(c, job, attempt, window or ArrivalsWindow(), diag)

    def trace(self, job: str, attempt: int | None = None, window=None) -> Iterator[str]:
        """A window of the attempt as Chrome/Perfetto trace JSON, streamed
        (:mod:`frlake.query.trace`); by default the culprits and their
        neighbours, at most 100,000 events."""
        from frlake.query.connect import connect
        from frlake.query.trace import TraceWindow, trace_events

        window = window or TraceWindow()
        if window.max_events < 1:
            raise FrlakeError("a trace needs a cap of at least 1 event")
        attempt = self._attempt_number(job, attempt)
        diag = self.stored_diagnosis(job, attempt)
        con = connect(self.catalog, self.lake, catalog_views=(), partition=(job, attempt))

        def stream() -> Iterator[str]:
            try:
                yield from trace_events(con, job, attempt, window, diag)
            finally:
                con.close()

        return stream()

    # -- alerts -----------------------------------------------------------------
    def notifier(self, config, on_delivered=None) -> Notifier:
        """The alerts of a :class:`~frlake.notify.config.NotifyConfig` over this lake: ``start()`` before
        the ingest whose incidents should be announced, ``run()`` after (frlake.notify.outbox).
        ``on_delivered(body)``: called with each message a receiver took."""
        from frlake.notify.outbox import Notifier

        def _cause_of(job: str, attempt: int) -> dict | None:  # a message carries it as JSON
            found = self.cause(job, attempt)
            return None if found is None else found.to_dict()

        return Notifier(self.catalog, config, lambda: [dict(row) for row in self.report("drain")], _cause_of,
                        on_delivered)

    def lake_stats(self) -> LakeStats:
        """The lake's counts and bytes as a monitoring system reads them (catalog.stats; GET /metrics), with
        the bytes of the raw copies on disk: one stat per copy, so walked once per catalog version, not at
        every scrape (a run's commits and every new run change the version; copies a failed run left
        behind are counted from the next one)."""
        stats = self.catalog.stats.snapshot()
        return replace(stats, raw_bytes=self.memoized("raw_bytes", (), self.lake.raw_bytes))

    def notify_status(self) -> list[DestinationStatus]:
        """Every alert receiver's queue, deliveries, failures and last error (GET /api/notify)."""
        return self.catalog.notify.status()

    # -- reports ----------------------------------------------------------------
    def cause(self, job: str, attempt: int, *, con: duckdb.DuckDBPyConnection | None = None) -> Cause | None:
        """Host or code? The call for one attempt, a judgement from the history
        before it (``frlake.query.causes``), with its figures and the culprit
        host's drain record just before it; None for a healthy attempt.
        ``con``: a connection with the lake's views (the server's), else one of its own."""
        from frlake.query.causes import CAUSE_VIEWS, cause_of

        if con is not None:
            return cause_of(con, job, attempt)
        with self._connection(catalog_views=CAUSE_VIEWS, lake_tables=()) as own:
            return cause_of(own, job, attempt)

    def report(self, name: str, window=None, limit: int | None = None, *,
               con: duckdb.DuckDBPyConnection | None = None, **params) -> ReportRows:
        """A fleet report by name (``frlake.query.reports.REPORTS``), each row
        with its evidence; ``params`` go to reports that take them (drain's
        ``policy``). ``con``: a connection with the lake's views to run it on
        (the server's, :meth:`views`), else one of its own."""
        from frlake.query.reports import REPORTS
        from frlake.query.window import Window

        if name not in REPORTS:
            raise FrlakeError(f"unknown report {name!r}; choose one of {', '.join(REPORTS)}")
        spec = REPORTS[name]
        window = window or Window()
        if con is not None:
            rows = spec.run(con, window, limit, **params)
        else:
            with self._connection(catalog_views=spec.views, lake_tables=spec.tables) as own:
                rows = spec.run(own, window, limit, **params)
        if spec.by_host:  # how much of the window's history a report of hosts can see
            rows.coverage = self.catalog.dumps.host_coverage(*window.bounds_ns())
        return rows


_worker_session: Frlake | None = None  # in a diagnosis worker: its session, kept from batch to batch


def _diagnose_batch_in_worker(settings: Settings, batch: tuple[list, list], complete: set, states: dict) -> list:
    """In a diagnosis worker (Frlake._diagnose_in_workers): what ``Frlake._batch_diagnoses`` makes of the
    batch, computed on a session of the worker's own over the same lake and catalog, which it only reads."""
    global _worker_session
    if _worker_session is None or _worker_session.settings != settings:
        if _worker_session is not None:
            _worker_session.close()
        _worker_session = Frlake(settings)
    return _worker_session._batch_diagnoses(batch, complete, states)


class _StoredBehind:
    """``store(batch)`` on a thread of its own, in the order given, while the caller makes the next batch;
    then ``stored(batch)`` on the caller's thread. The two share this machine's cores: storing (Parquet
    files, their syncs, the catalog) and diagnosing (DuckDB) let go of the GIL for most of their time. At
    most one batch is stored while the next is made, so memory stays bounded; a failed store is raised at
    the next call or at the end, and every batch given before a failure of the caller is still stored: as
    batches stored one after another."""

    def __init__(self, store, stored) -> None:
        from concurrent.futures import ThreadPoolExecutor

        self._store, self._stored = store, stored
        self._thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="frlake-store")
        self._storing: tuple | None = None  # (future, batch)

    def __call__(self, batch: list) -> None:
        self._wait()
        self._storing = self._thread.submit(self._store, batch), batch

    def _wait(self) -> None:
        if self._storing is not None:
            (storing, batch), self._storing = self._storing, None
            storing.result()
            self._stored(batch)

    def __enter__(self) -> _StoredBehind:
        return self

    def __exit__(self, *exc) -> None:
        try:
            self._wait()
        finally:
            self._thread.shutdown()


def _by_id(shared: list, by_key: dict, keys: list) -> list:
    """The files of ``keys`` and the ``shared`` ones, by id (the order a connection lists them in)."""
    return sorted([*shared, *(f for k in keys for f in by_key.get(k, ()))], key=lambda f: f.id)


def _lake_exists(settings: Settings) -> bool:
    if settings.db_url.startswith("sqlite"):
        return (settings.lake / "catalog.db").is_file() or Path(settings.db_url.split("///", 1)[-1]).is_file()
    return settings.lake.is_dir()
