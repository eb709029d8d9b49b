"""The catalog's Python API. It hands out frozen dataclasses, never ORM rows."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, func, insert, or_, select, text, true, tuple_, update
from sqlalchemy.orm import Session, sessionmaker

from frlake.catalog import db
from frlake.catalog.db import chunks
from frlake.catalog.models import (
    Attempt,
    CulpritRow,
    Dump,
    IncidentRow,
    IngestRun,
    Job,
    RankStat,
    SourceFile,
    StackId,
)
from frlake.entities import Diagnosis, stack_signature, stall_signature, top_frame

_FILE_COLUMNS = ("path", "size", "mtime_ns", "sha256", "status", "reason", "detail", "job", "attempt", "host", "rank",
                 "options_key", "frlake_version")
__all__ = ["Catalog", "DumpRecord", "FileRecord", "FileState"]


def utcnow() -> datetime:
    return datetime.now(UTC)


# The reason of a duplicate whose place (path) names another rank or host than the dump already in the lake
# holds: which is true the bytes cannot tell, and the diagnosis names no host for that rank (claimed_twice).
CLAIMED_TWICE = "claimed_twice"


@dataclass(frozen=True)
class FileState:
    path: str
    size: int
    mtime_ns: int
    sha256: str | None
    status: str
    reason: str | None = None
    options_key: str | None = None  # how it was judged (pipeline._Run._unchanged)
    frlake_version: str | None = None


@dataclass(frozen=True)
class FileRecord:
    """What one ingest learned about one file (or archive member)."""

    path: str
    size: int
    mtime_ns: int
    sha256: str | None
    status: str  # ingested | duplicate | rejected | forgotten
    reason: str | None = None
    detail: str | None = None
    job: str | None = None
    attempt: int | None = None
    host: str | None = None
    rank: int | None = None
    seen_at: datetime | None = None
    run_id: int | None = None
    options_key: str | None = None
    frlake_version: str | None = None


@dataclass(frozen=True)
class DumpRecord:
    sha256: str
    dump_id: int
    job: str
    attempt: int
    rank: int
    host: str
    fr_version: str | None
    encoding: str
    size_bytes: int
    n_entries: int
    first_ns: int | None
    last_ns: int | None


@dataclass(frozen=True)
class AttemptRow:
    """An attempt as the jobs page lists it."""

    job: str
    attempt: int
    verdict: str | None
    summary: str | None
    n_dumps: int
    hosts: tuple[str, ...]
    started_ns: int | None
    last_seen_at: datetime
    root_rank: int | None
    root_host: str | None
    root_reason: str | None


@dataclass(frozen=True)
class AttemptInfo:
    job: str
    attempt: int
    n_dumps: int
    hosts: tuple[str, ...]
    ranks: tuple[int, ...]
    started_ns: int | None
    ended_ns: int | None
    last_seen_at: datetime


_chunks = chunks
# Catalog.version: text, so nothing is compiled per call (the server asks at every request). A diagnosis stored
# again changes max(diagnosed_at): on SQLite the replacing incident may get the id of the one it deletes.
_VERSION = text(
    "SELECT (SELECT max(id) FROM lake_files WHERE status IN ('publishing', 'committed')),"
    " (SELECT max(id) FROM incidents), (SELECT max(diagnosed_at) FROM incidents),"
    " (SELECT max(id) FROM files), (SELECT max(id) FROM ingest_runs),"
    " (SELECT max(last_seen_at) FROM attempts), (SELECT max(id) FROM retired_files),"
    " (SELECT count(id) FROM lake_files WHERE status = 'committed')"
)


class Catalog:
    """The catalog database: what was seen, ingested, rejected, and published."""

    def __init__(self, db_url: str, *, check: bool = True):
        self.url = db_url
        self.engine = db.make_engine(db_url)
        self._sessions = sessionmaker(self.engine, expire_on_commit=False)
        if check:
            db.ensure_current(self.engine, db_url)

    def close(self) -> None:
        self.engine.dispose()

    def session(self, write: bool = False):
        return db.session_scope(self._sessions, write)

    # -- ingest runs --------------------------------------------------------
    def begin_run(self, sources: str, options: str, kind: str = "ingest") -> int:
        with self.session(write=True) as s:
            run = IngestRun(
                started_at=utcnow(), status="running", sources=sources, options=options, kind=kind,
                n_ingested=0, n_duplicate=0, n_rejected=0, n_unchanged=0,
            )
            s.add(run)
            s.flush()
            return run.id

    def finish_run(self, run_id: int, status: str, counts: dict[str, int]) -> None:
        with self.session(write=True) as s:
            s.execute(
                update(IngestRun)
                .where(IngestRun.id == run_id)
                .values(finished_at=utcnow(), status=status, **{f"n_{k}": v for k, v in counts.items()})
            )

    # -- what was seen ------------------------------------------------------
    def current_files(self, paths: Sequence[str]) -> dict[str, FileState]:
        """The latest known state of each path (unknown paths are absent)."""
        found: dict[str, FileState] = {}
        with self.session() as s:
            for chunk in _chunks(list(paths)):
                rows = s.execute(
                    select(SourceFile.path, SourceFile.size, SourceFile.mtime_ns, SourceFile.sha256, SourceFile.status,
                           SourceFile.reason, SourceFile.options_key, SourceFile.frlake_version)
                    .where(SourceFile.path.in_(chunk), SourceFile.is_current.is_(True))
                )
                for row in rows:
                    found[row.path] = FileState(*row)
        return found

    def known_dumps(self, shas: Sequence[str]) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
        """For each of ``shas`` the lake holds: the attempts (job, attempt)
        that hold those bytes, with the rank and host each gave them."""
        known: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        with self.session() as s:
            for chunk in _chunks(sorted(set(shas))):
                for sha, job, number, rank, host in s.execute(
                    select(Dump.sha256, Job.name, Attempt.number, Dump.rank, Dump.host)
                    .join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id)
                    .where(Dump.sha256.in_(chunk))
                ):
                    known.setdefault(sha, {})[(job, number)] = (rank, host)
        return known

    # -- publication --------------------------------------------------------
    def new_stack_ids(self, ids: Iterable[int]) -> set[int]:
        """The ids among ``ids`` that the lake's stacks table does not hold yet."""
        new = set(ids)
        with self.session() as s:
            for chunk in _chunks(sorted(new)):
                new.difference_update(s.scalars(select(StackId.stack_id).where(StackId.stack_id.in_(chunk))))
        return new

    def stack_index_is_empty(self) -> bool:
        with self.session() as s:
            return s.scalar(select(StackId.stack_id).limit(1)) is None

    def index_stacks(self, ids: Iterable[int]) -> None:
        """Fill the stack index from the lake (catalogs made before it existed)."""
        rows = sorted(set(ids))
        with self.session(write=True) as s:
            for chunk in _chunks(rows):
                s.execute(insert(StackId), [{"stack_id": i} for i in chunk])

    def commit_batch(
        self,
        run_id: int,
        dumps: Sequence[DumpRecord],
        files: Sequence[FileRecord],
        stack_ids: Sequence[int] = (),
        touched: Sequence[tuple[str, int]] = (),
        also: Callable[[Session], None] | None = None,
    ) -> None:
        """One transaction: the dumps, the files that produced them, and the
        Parquet files that hold their rows become visible together, and the
        attempts they join (and the ``touched`` ones, which received rows but
        no dump: the debug server's live stacks) go up one revision (their
        diagnosis is pending). ``also``: the storage wing's switch of lake
        files, in the same transaction."""
        now = utcnow()
        with self.session(write=True) as s:
            if stack_ids:
                s.execute(insert(StackId), [{"stack_id": i} for i in stack_ids])
            attempt_ids = self._attempt_ids(s, dumps, now, touched)
            if dumps:
                s.execute(insert(Dump), [
                    {"sha256": d.sha256, "dump_id": d.dump_id, "attempt_id": attempt_ids[(d.job, d.attempt)],
                     "rank": d.rank, "host": d.host, "fr_version": d.fr_version, "encoding": d.encoding,
                     "size_bytes": d.size_bytes, "n_entries": d.n_entries, "run_id": run_id, "ingested_at": now}
                    for d in dumps
                ])
            self._record_files(s, run_id, files, now)
            if also is not None:
                also(s)

    def _attempt_ids(self, s, dumps: Sequence[DumpRecord], now: datetime,
                     touched: Sequence[tuple[str, int]] = ()) -> dict[tuple[str, int], int]:
        ids: dict[tuple[str, int], int] = {}
        spans: dict[tuple[str, int], list] = {key: [None, None] for key in touched}
        for d in dumps:
            span = spans.setdefault((d.job, d.attempt), [None, None])
            if d.first_ns is not None:
                span[0] = d.first_ns if span[0] is None else min(span[0], d.first_ns)
            if d.last_ns is not None:
                span[1] = d.last_ns if span[1] is None else max(span[1], d.last_ns)
        for (job_name, number), (first, last) in spans.items():
            job = s.scalar(select(Job).where(Job.name == job_name))
            if job is None:
                job = Job(name=job_name, first_seen_at=now, last_seen_at=now)
                s.add(job)
                s.flush()
            job.last_seen_at = now
            att = s.scalar(select(Attempt).where(Attempt.job_id == job.id, Attempt.number == number))
            if att is None:
                att = Attempt(job_id=job.id, number=number, first_seen_at=now, last_seen_at=now,
                              started_ns=first, ended_ns=last, revision=1, diagnosis_due=True)
                s.add(att)
                s.flush()
            else:
                att.last_seen_at = now
                att.revision = (att.revision or 0) + 1
                att.diagnosis_due = True
                if first is not None:
                    att.started_ns = first if att.started_ns is None else min(att.started_ns, first)
                if last is not None:
                    att.ended_ns = last if att.ended_ns is None else max(att.ended_ns, last)
            ids[(job_name, number)] = att.id
        return ids

    def _record_files(self, s, run_id: int, files: Sequence[FileRecord], now: datetime) -> None:
        if not files:
            return
        current: dict[str, SourceFile] = {}
        for chunk in _chunks([f.path for f in files]):
            for row in s.scalars(select(SourceFile).where(SourceFile.path.in_(chunk), SourceFile.is_current.is_(True))):
                current[row.path] = row
        new: dict[str, dict] = {}  # path -> the row to insert (the last record of a path wins)
        for f in files:
            values = {k: getattr(f, k) for k in _FILE_COLUMNS}
            old = current.get(f.path)
            if old is not None and old.sha256 == f.sha256:
                for key, value in values.items():
                    setattr(old, key, value)
                old.seen_at, old.run_id, old.is_current = now, run_id, True
                new.pop(f.path, None)
                continue
            if old is not None:
                old.is_current = False
            new[f.path] = {**values, "run_id": run_id, "seen_at": now, "is_current": True}
        s.flush()
        if new:
            s.execute(insert(SourceFile), list(new.values()))

    # -- reading ------------------------------------------------------------
    def files(self, *, status: str | None = None, limit: int | None = None) -> list[FileRecord]:
        with self.session() as s:
            q = select(SourceFile).where(SourceFile.is_current.is_(True)).order_by(SourceFile.path)
            if status:
                q = q.where(SourceFile.status == status)
            if limit:
                q = q.limit(limit)
            return [
                FileRecord(r.path, r.size, r.mtime_ns, r.sha256, r.status, r.reason, r.detail, r.job,
                           r.attempt, r.host, r.rank, r.seen_at, r.run_id, r.options_key, r.frlake_version)
                for r in s.scalars(q)
            ]

    def attempts(self, job: str | None = None) -> list[AttemptInfo]:
        with self.session() as s:
            q = (
                select(Job.name, Attempt.number, Attempt.started_ns, Attempt.ended_ns, Attempt.last_seen_at,
                       func.count(Dump.id), Attempt.id)
                .join(Attempt, Attempt.job_id == Job.id)
                .join(Dump, Dump.attempt_id == Attempt.id)
                .group_by(Job.name, Attempt.number, Attempt.started_ns, Attempt.ended_ns, Attempt.last_seen_at, Attempt.id)
                .order_by(Job.name, Attempt.number)
            )
            if job is not None:
                q = q.where(Job.name == job)
            rows = s.execute(q).all()
            members: dict[int, list[tuple[int, str]]] = {}
            ids = [r[6] for r in rows]
            for chunk in _chunks(ids):
                for attempt_id, rank, host in s.execute(
                    select(Dump.attempt_id, Dump.rank, Dump.host).where(Dump.attempt_id.in_(chunk))
                ):
                    members.setdefault(attempt_id, []).append((rank, host))
            out = []
            for name, number, started, ended, last_seen, n, attempt_id in rows:
                m = members.get(attempt_id, [])
                out.append(
                    AttemptInfo(name, number, n, tuple(sorted({h for _, h in m})), tuple(sorted({r for r, _ in m})),
                                started, ended, last_seen)
                )
            return out

    # -- diagnoses --------------------------------------------------------------
    def save_diagnosis(self, diag: Diagnosis, revision: int = 0,
                       also: Callable[[Session], None] | None = None) -> bool:
        """Store (or replace) the diagnosis of one attempt, made from what the
        attempt held at ``revision``: the report, its culprits (with their
        stack signatures) and the notable ranks' lateness. ``also``: the
        storage wing's switch of lake files (the attempt's summary tables,
        frlake.storage.summary_tables), in the same transaction. Returns False,
        storing nothing, when the attempt is gone or holds a diagnosis made
        from a newer revision."""
        now = utcnow()
        with self.session(write=True) as s:
            # The attempt's row locked (PostgreSQL; SQLite writers take turns anyway), so two processes
            # that diagnose the same attempt store one after the other, and an older view never
            # replaces a newer one.
            found = s.execute(
                select(Attempt.id, IncidentRow.attempt_revision, Attempt.revision, Attempt.diagnosis_due)
                .join(Job, Job.id == Attempt.job_id)
                .outerjoin(IncidentRow, IncidentRow.attempt_id == Attempt.id)
                .where(Job.name == diag.job, Attempt.number == diag.attempt).with_for_update(of=Attempt)
            ).first()
            if found is None:
                return False  # forgotten meanwhile
            attempt_id, stored, current, due = found
            if stored is not None and stored > revision:
                return False
            if also is not None:
                also(s)
            if due != (revision < (current or 0)):
                s.execute(update(Attempt).where(Attempt.id == attempt_id).values(diagnosis_due=not due))
            old = select(IncidentRow.id).where(IncidentRow.attempt_id == attempt_id).scalar_subquery()
            s.execute(delete(CulpritRow).where(CulpritRow.incident_id == old))
            s.execute(delete(RankStat).where(RankStat.incident_id == old))
            s.execute(delete(IncidentRow).where(IncidentRow.attempt_id == attempt_id))
            s.flush()
            incident = IncidentRow(
                attempt_id=attempt_id, verdict=diag.verdict.value, summary=diag.summary,
                world_size=diag.world_size, n_dumps=len(diag.ranks_dumped),
                algorithm_version=diag.algorithm_version, diagnosed_at=now,
                report=json.dumps(diag.to_dict(), default=str), attempt_revision=revision,
            )
            s.add(incident)
            s.flush()
            s.add_all(
                CulpritRow(incident_id=incident.id, position=i, rank=c.rank, host=c.host, reason=c.reason,
                           role=c.role, pg=c.pg, pg_desc=c.pg_desc, seq=c.seq, op=c.op, lateness_ms=c.lateness_ms,
                           stack_signature=stack_signature(c.stack), stall_signature=stall_signature(c.stack),
                           top_frame=top_frame(c.stack), evidence=c.evidence, host_inferred=c.host_inferred)
                for i, c in enumerate(diag.culprits)
            )
            s.add_all(RankStat(incident_id=incident.id, **r) for r in diag.rank_lateness)
        return True

    def diagnosis(self, job: str, attempt: int) -> Diagnosis | None:
        """The stored diagnosis of an attempt (None if it has none)."""
        with self.session() as s:
            report = s.scalar(
                select(IncidentRow.report).join(Attempt, Attempt.id == IncidentRow.attempt_id)
                .join(Job, Job.id == Attempt.job_id).where(Job.name == job, Attempt.number == attempt)
            )
        return Diagnosis.from_dict(json.loads(report)) if report else None

    def _attempts_query(self, job, host, verdict, since_ns, until_ns, reason=None, exact_host=None):
        n_dumps = select(func.count(Dump.id)).where(Dump.attempt_id == Attempt.id).scalar_subquery()
        root = (select(CulpritRow.rank, CulpritRow.host, CulpritRow.reason, CulpritRow.incident_id)
                .where(CulpritRow.position == 0).subquery())
        q = (
            select(Job.name, Attempt.number, IncidentRow.verdict, IncidentRow.summary, n_dumps, Attempt.started_ns,
                   Attempt.last_seen_at, root.c.rank, root.c.host, root.c.reason, Attempt.id)
            .join(Attempt, Attempt.job_id == Job.id)
            .outerjoin(IncidentRow, IncidentRow.attempt_id == Attempt.id)
            .outerjoin(root, root.c.incident_id == IncidentRow.id)
        )
        if job is not None:
            q = q.where(Job.name == job)
        if verdict is not None:
            q = q.where(IncidentRow.verdict == verdict)
        if reason is not None:
            q = q.where(root.c.reason == reason)
        if host is not None:  # a part of the host's name, any case ("b03" finds gpu-b03)
            part = host.lower()
            q = q.where(select(Dump.id).where(Dump.attempt_id == Attempt.id,
                                              func.lower(Dump.host).contains(part, autoescape=True)).exists()
                        | func.lower(root.c.host).contains(part, autoescape=True))
        if exact_host is not None:
            q = q.where(select(Dump.id).where(Dump.attempt_id == Attempt.id, Dump.host == exact_host).exists()
                        | (root.c.host == exact_host))
        if since_ns is not None:
            q = q.where(Attempt.started_ns >= since_ns)
        if until_ns is not None:
            q = q.where(Attempt.started_ns < until_ns)
        return q

    def attempt_facets(self, *, job: str | None = None, host: str | None = None, verdict: str | None = None,
                       since_ns: int | None = None, until_ns: int | None = None, reason: str | None = None,
                       limit: int = 20) -> dict[str, list[tuple[str, int]]]:
        """Counts of the attempts ``list_attempts`` would list, by verdict, by
        host (the attempts with a dump from it) and by the root cause's
        reason, most first (datasette's facets)."""
        matching = self._attempts_query(job, host, verdict, since_ns, until_ns, reason).subquery()
        with self.session() as s:
            def counts(column, source) -> list[tuple[str, int]]:
                n = func.count().label("n")
                rows = s.execute(select(column, n).select_from(source).where(column.is_not(None))
                                 .group_by(column).order_by(n.desc(), column).limit(limit)).all()
                return [(r[0], r[1]) for r in rows]

            by_host = (select(Dump.host.label("host"), Dump.attempt_id).distinct()
                       .where(Dump.attempt_id.in_(select(matching.c.id))).subquery())
            return {"verdict": counts(matching.c.verdict, matching), "host": counts(by_host.c.host, by_host),
                    "reason": counts(matching.c.reason, matching)}

    def claimed_twice(self, job: str, attempt: int) -> dict[int, list[str]]:
        """The ranks of an attempt whose dump's bytes were also found in another host's place (a copy of a
        folder): rank -> every host that claims them, sorted. Which one ran the rank the bytes cannot tell."""
        with self.session() as s:
            copies = s.execute(select(SourceFile.sha256, SourceFile.host).where(
                SourceFile.job == job, SourceFile.attempt == attempt, SourceFile.is_current.is_(True),
                SourceFile.status == "duplicate", SourceFile.reason == CLAIMED_TWICE)).all()
            if not copies:
                return {}
            dumps = s.execute(
                select(Dump.sha256, Dump.rank, Dump.host).join(Attempt, Attempt.id == Dump.attempt_id)
                .join(Job, Job.id == Attempt.job_id)
                .where(Job.name == job, Attempt.number == attempt, Dump.sha256.in_({sha for sha, _ in copies}))
            ).all()
        out: dict[int, list[str]] = {}
        for sha, rank, host in dumps:
            hosts = {host} | {h for copied, h in copies if copied == sha and h is not None}
            if len(hosts) > 1:
                out[rank] = sorted(hosts)
        return out

    def marked_complete(self, attempts: Sequence[tuple[str, int]]) -> set[tuple[str, int]]:
        """Which of these attempts a user said are complete (no more dumps
        will come): the mark is kept in their stored diagnosis
        (``Diagnosis.complete``). One statement per 500 attempts, and none for
        none: a few pending attempts never read every stored report."""
        q = (select(Job.name, Attempt.number, IncidentRow.report)
             .join(Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)
             .where(IncidentRow.report.contains('"complete": true', autoescape=True)))
        with self.session() as s:
            rows = [r for chunk in chunks(sorted(set(attempts)), 500)
                    for r in s.execute(q.where(tuple_(Job.name, Attempt.number).in_(chunk))).all()]
        return {(job, number) for job, number, report in rows if json.loads(report).get("complete") is True}

    def list_attempts(self, *, job: str | None = None, host: str | None = None, verdict: str | None = None,
                      since_ns: int | None = None, until_ns: int | None = None, reason: str | None = None,
                      exact_host: str | None = None, offset: int = 0,
                      limit: int = 50) -> tuple[int, list[AttemptRow]]:
        """Attempts newest first, filtered (``host``: a part of a host's name,
        any case; ``exact_host``: that host; ``reason``: the root cause's); returns
        (total matching, one page)."""
        q = self._attempts_query(job, host, verdict, since_ns, until_ns, reason, exact_host)
        with self.session() as s:
            total = s.scalar(select(func.count()).select_from(q.subquery()))
            rows = s.execute(
                q.order_by(Attempt.started_ns.desc().nulls_last(), Attempt.last_seen_at.desc(), Job.name, Attempt.number)
                .offset(offset).limit(limit)
            ).all()
            hosts: dict[int, set[str]] = {}
            for chunk in _chunks([r[10] for r in rows]):
                for attempt_id, h in s.execute(
                    select(Dump.attempt_id, Dump.host).where(Dump.attempt_id.in_(chunk)).distinct()
                ):
                    hosts.setdefault(attempt_id, set()).add(h)
            out = [
                AttemptRow(r[0], r[1], r[2], r[3], r[4], tuple(sorted(hosts.get(r[10], ()))), r[5], r[6], r[7], r[8], r[9])
                for r in rows
            ]
            return total or 0, out

    def version(self) -> tuple:
        """Changes whenever what the SQL views show changes: new lake files,
        new or replaced diagnoses, new files seen."""
        with self.session() as s:  # one plain statement: the server asks at every request
            return tuple(s.execute(_VERSION).one())

    def attempt_revision(self, job: str, attempt: int) -> int | None:
        """The attempt's revision (None if the lake has no such attempt)."""
        with self.session() as s:
            return s.scalar(
                select(Attempt.revision).join(Job, Job.id == Attempt.job_id)
                .where(Job.name == job, Attempt.number == attempt)
            )

    def diagnosis_state(self, job: str, attempt: int) -> tuple[int, bool, bool] | None:
        """The attempt's revision, whether its diagnosis is due, and whether
        a file holds a copy of one of its dumps in another place (see
        claimed_twice); None if the lake has no such attempt. Not due: the
        stored diagnosis, and the summary tables stored with it, are of this
        revision."""
        copies = select(SourceFile.id).where(
            SourceFile.job == job, SourceFile.attempt == attempt, SourceFile.reason == CLAIMED_TWICE).exists()
        with self.session() as s:
            row = s.execute(
                select(Attempt.revision, Attempt.diagnosis_due, copies).join(Job, Job.id == Attempt.job_id)
                .where(Job.name == job, Attempt.number == attempt)
            ).first()
        return None if row is None else (row[0] or 0, bool(row[1]), bool(row[2]))

    def pending_diagnoses(self) -> list[tuple[str, int]]:
        """Attempts whose stored diagnosis is missing or older than their dumps."""
        q = (
            select(Job.name, Attempt.number)
            .join(Attempt, Attempt.job_id == Job.id)
            .where(Attempt.diagnosis_due.is_(true()))  # an index: the pending ones only, however big the lake
            .order_by(Job.name, Attempt.number)
        )
        with self.session() as s:
            return [tuple(r) for r in s.execute(q)]

    def rank_conflicts(self, attempts: Iterable[tuple[str, int]]) -> list[tuple[str, int, int, int]]:
        """(job, attempt, rank, dumps) for every rank of these attempts that
        more than one distinct dump claims (snapshots, or a conflict to look at).
        Reads only these attempts' dumps, so its cost does not grow with the lake."""
        wanted = sorted(set(attempts))
        out: list[tuple[str, int, int, int]] = []
        with self.session() as s:
            for chunk in _chunks(wanted, 100):
                q = (
                    select(Job.name, Attempt.number, Dump.rank, func.count(Dump.id))
                    .join(Attempt, Attempt.job_id == Job.id).join(Dump, Dump.attempt_id == Attempt.id)
                    .where(or_(*[(Job.name == j) & (Attempt.number == a) for j, a in chunk]))
                    .group_by(Job.name, Attempt.number, Dump.rank).having(func.count(Dump.id) > 1)
                )
                out += [tuple(r) for r in s.execute(q)]
        return sorted(out)

    def has_attempt(self, job: str, attempt: int) -> bool:
        with self.session() as s:
            return s.scalar(
                select(Attempt.id).join(Job, Job.id == Attempt.job_id).where(Job.name == job, Attempt.number == attempt)
            ) is not None

    def attempt_keys(self, job: str | None = None) -> list[tuple[str, int]]:
        q = select(Job.name, Attempt.number).join(Attempt, Attempt.job_id == Job.id).order_by(Job.name, Attempt.number)
        if job is not None:
            q = q.where(Job.name == job)
        with self.session() as s:
            return [tuple(r) for r in s.execute(q)]

    def rows(self, query) -> list[tuple]:
        """The rows of a read-only SELECT built on the models (the SQL views'
        sources, frlake/query/catalog_views.py)."""
        with self.session() as s:
            return [tuple(r) for r in s.execute(query)]


