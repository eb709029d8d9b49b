"""The dumps the lake holds, committed by batch with the files that held them and the attempts they join;
the index of the stacks the lake's ``stacks`` table holds; and the ranks that more than one dump or host
claims."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import and_, func, insert, or_, select
from sqlalchemy.orm import Session

from frlake.catalog.db import Store, chunks, utcnow
from frlake.catalog.models import Attempt, Dump, HostClaim, Job, LauncherFailure, SourceFile, StackId
from frlake.catalog.seen import CLAIMED_TWICE, FileRecord, record


def _later(first_id: int | None, first_ns: int | None, than_id: int | None, than_ns: int | None) -> bool:
    """Whether a snapshot whose first entry is (first_id, first_ns) is a later one of its process than
    (than_id, than_ns): a higher first record id (its ring buffer turned over), one without ids last."""
    def key(i, ns):
        return (i is not None, i if i is not None else 0, ns if ns is not None else 0)
    return key(first_id, first_ns) > key(than_id, than_ns)


@dataclass(frozen=True)
class DumpRecord:
    sha256: str
    dump_id: int
    job: str
    attempt: int
    rank: int
    host: str | None  # None: unknown
    fr_version: str | None
    encoding: str
    size_bytes: int
    n_entries: int
    first_ns: int | None
    last_ns: int | None
    first_record_id: int | None = None


class Dumps(Store):
    """``catalog.dumps``."""

    def known(self, shas: Sequence[str]) -> dict[str, dict[tuple[str, int], tuple[int, str]]]:
        """For each of ``shas`` the lake holds: the attempts (job, attempt)
        that hold those bytes, with the rank and host each gave them."""
        known: dict[str, dict[tuple[str, int], tuple[int, str]]] = {}
        with self.session() as s:
            for chunk in chunks(sorted(set(shas))):
                for sha, job, number, rank, host in s.execute(
                    select(Dump.sha256, Job.name, Attempt.number, Dump.rank, Dump.host)
                    .join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id)
                    .where(Dump.sha256.in_(chunk))
                ):
                    known.setdefault(sha, {})[(job, number)] = (rank, host)
        return known

    def commit(
        self,
        run_id: int,
        dumps: Sequence[DumpRecord],
        files: Sequence[FileRecord],
        stack_ids: Sequence[int] = (),
        touched: Sequence[tuple[str, int]] = (),
        also: Callable[[Session], None] | None = None,
        claims: Sequence[tuple] = (),
        failures: dict | None = None,
    ) -> None:
        """One transaction: the dumps, the files that produced them, and the
        Parquet files that hold their rows become visible together, and the
        attempts they join (and the ``touched`` ones, which received rows but
        no dump: the debug server's live stacks) go up one revision (their
        diagnosis is pending). ``also``: the storage wing's switch of lake
        files, in the same transaction. ``claims`` and ``failures``: what the
        host maps beside the dumps say (frlake.ingest.worker.ChunkResult), each
        kept once."""
        now = utcnow()
        with self.session(write=True) as s:
            if stack_ids:
                s.execute(insert(StackId), [{"stack_id": i} for i in stack_ids])
            attempt_ids = _attempt_ids(s, dumps, now, touched)
            if dumps:
                s.execute(insert(Dump), [
                    {"sha256": d.sha256, "dump_id": d.dump_id, "attempt_id": attempt_ids[(d.job, d.attempt)],
                     "rank": d.rank, "host": d.host, "fr_version": d.fr_version, "encoding": d.encoding,
                     "size_bytes": d.size_bytes, "n_entries": d.n_entries, "run_id": run_id, "ingested_at": now,
                     "first_record_id": d.first_record_id, "first_ns": d.first_ns}
                    for d in dumps
                ])
            record(s, run_id, files, now)
            _claims(s, attempt_ids, claims, failures or {}, now)
            if also is not None:
                also(s)

    def host_sources(self, attempts: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[list[dict], list[dict]]]:
        """For each of ``attempts`` that has any: the claims on its ranks' hosts (by rank, precedence, path)
        and the workers its launcher's failure summaries name (by rank), read for all at once."""
        from sqlalchemy import tuple_

        out: dict[tuple[str, int], tuple[list[dict], list[dict]]] = {}
        with self.session() as s:
            for chunk in chunks(sorted(set(attempts)), 500):
                where = tuple_(Job.name, Attempt.number).in_(chunk)
                for job, number, *row in s.execute(
                    select(Job.name, Attempt.number, HostClaim.rank, HostClaim.host, HostClaim.source,
                           HostClaim.precedence, HostClaim.path, HostClaim.attach_id)
                    .join(Attempt, Attempt.id == HostClaim.attempt_id).join(Job, Job.id == Attempt.job_id)
                    .where(where).order_by(Job.name, Attempt.number, HostClaim.rank, HostClaim.precedence,
                                           HostClaim.path, HostClaim.host)):
                    out.setdefault((job, number), ([], []))[0].append(dict(zip(
                        ("rank", "host", "source", "precedence", "path", "attach_id"), row, strict=True)))
                for job, number, f in s.execute(
                    select(Job.name, Attempt.number, LauncherFailure)
                    .join(Attempt, Attempt.id == LauncherFailure.attempt_id).join(Job, Job.id == Attempt.job_id)
                    .where(where).order_by(Job.name, Attempt.number, LauncherFailure.rank, LauncherFailure.path)):
                    out.setdefault((job, number), ([], []))[1].append({
                        "rank": f.rank, "local_rank": f.local_rank, "host": f.host, "exitcode": f.exitcode,
                        "pid": f.pid, "time": f.failed_at, "error_file": f.error_file, "message": f.message,
                        "traceback": f.traceback, "root_cause": f.root_cause, "path": f.path})
        return out

    def host_coverage(self, since_ns: int | None, until_ns: int | None) -> dict:
        """Of the attempts started in [since_ns, until_ns): how many there are and how many have every
        dump's host known (from its place, a host map beside it, or one attached since): what a host report
        covers. An attempt with no start time is counted when the window is open."""
        from sqlalchemy import and_, exists

        where = []
        if since_ns is not None:
            where.append(Attempt.started_ns >= since_ns)
        if until_ns is not None:
            where.append(Attempt.started_ns < until_ns)
        unknown = exists().where(Dump.attempt_id == Attempt.id, Dump.host.is_(None),
                                 ~exists().where(HostClaim.attempt_id == Attempt.id, HostClaim.rank == Dump.rank))
        with self.session() as s:
            total, missing = s.execute(
                select(func.count(Attempt.id), func.count(Attempt.id).filter(unknown))
                .where(and_(True, *where))).one()
        return {"attempts": total, "hosts_known": total - missing,
                "share": round((total - missing) / total, 4) if total else None}

    # -- host maps attached after the fact (frlake hosts attach) ----------------
    def attach_hosts(self, job: str, attempt: int | None, hosts: dict[int, str], path: str,
                     attach_id: str) -> list[tuple[str, int]]:
        """Keep ``hosts`` (rank -> host) as the claims of one attach, on the attempt (or every attempt of the
        job), and mark them to be diagnosed again; the attempts it is on. Attaching what is attached already
        (the same ``attach_id``: the same map on the same attempts) changes nothing."""
        from sqlalchemy import update

        now = utcnow()
        with self.session(write=True) as s:
            q = select(Attempt.id, Attempt.number).join(Job, Job.id == Attempt.job_id).where(Job.name == job)
            if attempt is not None:
                q = q.where(Attempt.number == attempt)
            attempts = s.execute(q.order_by(Attempt.number)).all()
            if not attempts or s.scalar(select(HostClaim.id).where(HostClaim.attach_id == attach_id).limit(1)):
                return [(job, n) for _, n in attempts] if attempts else []
            s.execute(insert(HostClaim), [
                {"attempt_id": a, "rank": r, "host": h, "source": "attached", "precedence": -1, "path": path,
                 "attach_id": attach_id, "claimed_at": now} for a, _ in attempts for r, h in sorted(hosts.items())])
            s.execute(update(Attempt).where(Attempt.id.in_([a for a, _ in attempts]))
                      .values(revision=Attempt.revision + 1, diagnosis_due=True))
        return [(job, n) for _, n in attempts]

    def detach_hosts(self, attach_id: str) -> list[tuple[str, int]]:
        """Remove one attach's claims; the attempts they were on (diagnosed again), none if it is not there."""
        from sqlalchemy import delete, update

        with self.session(write=True) as s:
            rows = s.execute(select(Attempt.id, Job.name, Attempt.number).join(Job, Job.id == Attempt.job_id)
                             .where(Attempt.id.in_(select(HostClaim.attempt_id).where(HostClaim.attach_id == attach_id)))
                             .order_by(Job.name, Attempt.number)).all()
            if not rows:
                return []
            s.execute(delete(HostClaim).where(HostClaim.attach_id == attach_id))
            s.execute(update(Attempt).where(Attempt.id.in_([a for a, *_ in rows]))
                      .values(revision=Attempt.revision + 1, diagnosis_due=True))
        return [(j, n) for _, j, n in rows]

    def attached(self, job: str | None = None) -> list[dict]:
        """Every attach: its id, job, attempts, file, ranks and hosts, when."""
        q = (select(HostClaim.attach_id, Job.name, Attempt.number, HostClaim.path, func.count(HostClaim.id),
                    func.count(func.distinct(HostClaim.host)), func.min(HostClaim.claimed_at))
             .join(Attempt, Attempt.id == HostClaim.attempt_id).join(Job, Job.id == Attempt.job_id)
             .where(HostClaim.attach_id.is_not(None)))
        if job is not None:
            q = q.where(Job.name == job)
        out: dict[str, dict] = {}
        with self.session() as s:
            for aid, name, number, path, ranks, hosts, at in s.execute(
                    q.group_by(HostClaim.attach_id, Job.name, Attempt.number, HostClaim.path)
                    .order_by(func.min(HostClaim.claimed_at), HostClaim.attach_id, Attempt.number)):
                row = out.setdefault(aid, {"attach_id": aid, "job": name, "attempts": [], "path": path,
                                           "ranks": ranks, "hosts": hosts, "attached_at": at})
                row["attempts"].append(number)
        return list(out.values())

    # -- the stack index --------------------------------------------------------
    def newest_of_ranks(self, job: str, ranks: Iterable[int]) -> tuple[int | None, dict[int, tuple[int, int | None, int | None]]]:
        """The job's newest attempt number (None: it has none), and for each of ``ranks`` that has a dump, its
        dump in the newest attempt that has one: (attempt, its first record id, its first entry's time), the
        latest snapshot (the highest first record id; one without ids last). One query per 500 ranks: the rows
        read are the ranks' dumps in their newest attempts, whatever the job's history."""
        latest: dict[int, tuple[int, int | None, int | None]] = {}
        with self.session() as s:
            newest = s.scalar(select(func.max(Attempt.number)).join(Job, Job.id == Attempt.job_id)
                              .where(Job.name == job))
            for chunk in chunks(sorted(set(ranks))):
                top = (select(Dump.rank, func.max(Attempt.number).label("number"))
                       .join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id)
                       .where(Job.name == job, Dump.rank.in_(chunk)).group_by(Dump.rank).subquery())
                for rank, number, first_id, first_ns in s.execute(
                        select(Dump.rank, Attempt.number, Dump.first_record_id, Dump.first_ns)
                        .join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id)
                        .join(top, and_(top.c.rank == Dump.rank, top.c.number == Attempt.number))
                        .where(Job.name == job)):
                    held = latest.get(rank)
                    if held is None or _later(first_id, first_ns, held[1], held[2]):
                        latest[rank] = (number, first_id, first_ns)
        return newest, latest

    def arrival(self, job: str, attempt: int) -> tuple[int | None, datetime | None]:
        """When the attempt's newest dump file was written (its mtime, ns) and when its newest dump was
        ingested: an alert's delay is counted from the first."""
        with self.session() as s:
            mtime = s.scalar(select(func.max(SourceFile.mtime_ns)).where(
                SourceFile.job == job, SourceFile.attempt == attempt, SourceFile.is_current.is_(True),
                SourceFile.status.in_(("ingested", "duplicate"))))
            ingested = s.scalar(select(func.max(Dump.ingested_at)).join(Attempt, Attempt.id == Dump.attempt_id)
                                .join(Job, Job.id == Attempt.job_id)
                                .where(Job.name == job, Attempt.number == attempt))
        return mtime, ingested

    def new_stack_ids(self, ids: Iterable[int]) -> set[int]:
        """The ids among ``ids`` that the lake's stacks table does not hold yet."""
        new = set(ids)
        with self.session() as s:
            for chunk in chunks(sorted(new)):
                new.difference_update(s.scalars(select(StackId.stack_id).where(StackId.stack_id.in_(chunk))))
        return new

    def stack_index_is_empty(self) -> bool:
        with self.session() as s:
            return s.scalar(select(StackId.stack_id).limit(1)) is None

    def index_stacks(self, ids: Iterable[int]) -> None:
        """Fill the stack index from the lake (catalogs made before it existed)."""
        rows = sorted(set(ids))
        with self.session(write=True) as s:
            for chunk in chunks(rows):
                s.execute(insert(StackId), [{"stack_id": i} for i in chunk])

    # -- ranks claimed twice ----------------------------------------------------
    def rank_conflicts(self, attempts: Iterable[tuple[str, int]]) -> list[tuple[str, int, int, int]]:
        """(job, attempt, rank, dumps) for every rank of these attempts that
        more than one distinct dump claims (snapshots, or a conflict to look at).
        Reads only these attempts' dumps, so its cost does not grow with the lake."""
        wanted = sorted(set(attempts))
        out: list[tuple[str, int, int, int]] = []
        with self.session() as s:
            for chunk in chunks(wanted, 100):
                q = (
                    select(Job.name, Attempt.number, Dump.rank, func.count(Dump.id))
                    .join(Attempt, Attempt.job_id == Job.id).join(Dump, Dump.attempt_id == Attempt.id)
                    .where(or_(*[(Job.name == j) & (Attempt.number == a) for j, a in chunk]))
                    .group_by(Job.name, Attempt.number, Dump.rank).having(func.count(Dump.id) > 1)
                )
                out += [tuple(r) for r in s.execute(q)]
        return sorted(out)

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


def _attempt_ids(s: Session, dumps: Sequence[DumpRecord], now: datetime,
                 touched: Sequence[tuple[str, int]] = ()) -> dict[tuple[str, int], int]:
    """The id of each attempt the dumps (and ``touched``) join, made where new; each goes up one revision,
    its diagnosis due, its span widened to the dumps' entries."""
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


def _claims(s: Session, attempt_ids: dict[tuple[str, int], int], claims: Sequence[tuple], failures: dict,
            now: datetime) -> None:
    """Insert the host claims and launcher failures not kept yet (a later snapshot of a rank, or a rerun,
    finds the same ones again)."""
    wanted = {a for j, at, *_ in claims if (a := attempt_ids.get((j, at))) is not None}
    wanted |= {a for (j, at, _, _) in failures if (a := attempt_ids.get((j, at))) is not None}
    if not wanted:
        return
    kept = set()
    done = set()
    for chunk in chunks(sorted(wanted)):
        kept.update(s.execute(select(HostClaim.attempt_id, HostClaim.rank, HostClaim.host, HostClaim.source,
                                     HostClaim.path).where(HostClaim.attempt_id.in_(chunk),
                                                           HostClaim.attach_id.is_(None))).all())
        done.update(s.execute(select(LauncherFailure.attempt_id, LauncherFailure.rank, LauncherFailure.path)
                              .where(LauncherFailure.attempt_id.in_(chunk))).all())
    rows = []
    for job, attempt, rank, host, source, precedence, path in claims:
        key = (attempt_ids[(job, attempt)], rank, host, source, path)
        if key not in kept:
            kept.add(key)
            rows.append({"attempt_id": key[0], "rank": rank, "host": host, "source": source,
                         "precedence": precedence, "path": path, "attach_id": None, "claimed_at": now})
    if rows:
        s.execute(insert(HostClaim), rows)
    rows = []
    for (job, attempt, rank, path), f in sorted(failures.items()):
        key = (attempt_ids[(job, attempt)], rank, path)
        if key not in done:
            done.add(key)
            rows.append({"attempt_id": key[0], "rank": rank, "local_rank": f.local_rank, "host": f.host,
                         "exitcode": f.exitcode, "pid": f.pid, "failed_at": f.time, "error_file": f.error_file,
                         "message": f.message, "traceback": f.traceback, "root_cause": f.root_cause, "path": path})
    if rows:
        s.execute(insert(LauncherFailure), rows)
