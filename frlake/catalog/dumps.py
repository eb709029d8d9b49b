"""The dumps the lake holds, committed by batch with the files that held them and the attempts they join;
the index of the stacks the lake's ``stacks`` table holds; and the ranks that more than one dump or host
claims."""

from __future__ import annotations

from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, insert, or_, select
from sqlalchemy.orm import Session

from frlake.catalog.db import Store, chunks, utcnow
from frlake.catalog.models import Attempt, Dump, Job, SourceFile, StackId
from frlake.catalog.seen import CLAIMED_TWICE, FileRecord, record


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
            attempt_ids = _attempt_ids(s, dumps, now, touched)
            if dumps:
                s.execute(insert(Dump), [
                    {"sha256": d.sha256, "dump_id": d.dump_id, "attempt_id": attempt_ids[(d.job, d.attempt)],
                     "rank": d.rank, "host": d.host, "fr_version": d.fr_version, "encoding": d.encoding,
                     "size_bytes": d.size_bytes, "n_entries": d.n_entries, "run_id": run_id, "ingested_at": now}
                    for d in dumps
                ])
            record(s, run_id, files, now)
            if also is not None:
                also(s)

    # -- the stack index --------------------------------------------------------
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
