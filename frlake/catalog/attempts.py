"""The attempts of the lake's jobs as pages list them: filtered, faceted and paged (the jobs page, a job's
and a host's history), with the dumps each holds and its stored verdict."""

from __future__ import annotations

from sqlalchemy import func, select

from frlake.catalog.db import Store, chunks
from frlake.catalog.models import Attempt, CulpritRow, Dump, IncidentRow, Job
from frlake.catalog.rows import AttemptInfo, AttemptRow
from frlake.entities import VERDICTS


class Attempts(Store):
    """``catalog.attempts``."""

    def info(self, job: str | None = None) -> list[AttemptInfo]:
        """Every attempt (of ``job``) that holds a dump, with its ranks and hosts, by job and number."""
        with self.session() as s:
            q = (
                select(Job.name, Attempt.number, Attempt.started_ns, Attempt.ended_ns, Attempt.last_seen_at,
                       func.count(Dump.id), Attempt.id)
                .join(Attempt, Attempt.job_id == Job.id)
                .join(Dump, Dump.attempt_id == Attempt.id)
                .group_by(Job.name, Attempt.number, Attempt.started_ns, Attempt.ended_ns, Attempt.last_seen_at,
                          Attempt.id)
                .order_by(Job.name, Attempt.number)
            )
            if job is not None:
                q = q.where(Job.name == job)
            rows = s.execute(q).all()
            members: dict[int, list[tuple[int, str]]] = {}
            ids = [r[6] for r in rows]
            for chunk in chunks(ids):
                for attempt_id, rank, host in s.execute(
                    select(Dump.attempt_id, Dump.rank, Dump.host).where(Dump.attempt_id.in_(chunk))
                ):
                    members.setdefault(attempt_id, []).append((rank, host))
            out = []
            for name, number, started, ended, last_seen, n, attempt_id in rows:
                m = members.get(attempt_id, [])
                out.append(
                    AttemptInfo(name, number, n, tuple(sorted({h for _, h in m if h is not None})),
                                tuple(sorted({r for r, _ in m})),
                                started, ended, last_seen)
                )
            return out

    def page(self, *, job: str | None = None, host: str | None = None, verdict: str | None = None,
             since_ns: int | None = None, until_ns: int | None = None, reason: str | None = None,
             exact_host: str | None = None, q: str | None = None, offset: int = 0,
             limit: int | None = 50) -> tuple[int, list[AttemptRow]]:
        """Attempts newest first, filtered (``host``: a part of a host's name,
        any case; ``exact_host``: that host; ``reason``: the root cause's; ``q``:
        a search, see ``_search``); returns (total matching, one page; ``limit``
        None: every one)."""
        q = _query(job, host, verdict, since_ns, until_ns, reason, exact_host, q)
        with self.session() as s:
            total = s.scalar(select(func.count()).select_from(q.subquery()))
            rows = s.execute(
                q.order_by(Attempt.started_ns.desc().nulls_last(), Attempt.last_seen_at.desc(), Job.name,
                           Attempt.number).offset(offset).limit(limit)
            ).all()
            hosts: dict[int, set[str]] = {}
            for chunk in chunks([r[10] for r in rows]):
                for attempt_id, h in s.execute(
                    select(Dump.attempt_id, Dump.host).where(Dump.attempt_id.in_(chunk), Dump.host.is_not(None)).distinct()
                ):
                    hosts.setdefault(attempt_id, set()).add(h)
            out = [
                AttemptRow(r[0], r[1], r[2], r[3], r[4], tuple(sorted(hosts.get(r[10], ()))), r[5], r[6], r[7], r[8],
                           r[9])
                for r in rows
            ]
            return total or 0, out

    def facets(self, *, job: str | None = None, host: str | None = None, verdict: str | None = None,
               since_ns: int | None = None, until_ns: int | None = None, reason: str | None = None,
               q: str | None = None, limit: int = 20) -> dict[str, list[tuple[str, int]]]:
        """Counts of the attempts ``page`` would list, by verdict, by
        host (the attempts with a dump from it) and by the root cause's
        reason, most first (datasette's facets)."""
        matching = _query(job, host, verdict, since_ns, until_ns, reason, q=q).subquery()
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

    def exists(self, job: str, attempt: int) -> bool:
        with self.session() as s:
            return s.scalar(
                select(Attempt.id).join(Job, Job.id == Attempt.job_id).where(Job.name == job, Attempt.number == attempt)
            ) is not None

    def keys(self, job: str | None = None) -> list[tuple[str, int]]:
        """(job, attempt) of every attempt (of ``job``), by job and number."""
        q = select(Job.name, Attempt.number).join(Attempt, Attempt.job_id == Job.id).order_by(Job.name, Attempt.number)
        if job is not None:
            q = q.where(Job.name == job)
        with self.session() as s:
            return [tuple(r) for r in s.execute(q)]

    def revision(self, job: str, attempt: int) -> int | None:
        """The attempt's revision (None if the lake has no such attempt)."""
        with self.session() as s:
            return s.scalar(
                select(Attempt.revision).join(Job, Job.id == Attempt.job_id)
                .where(Job.name == job, Attempt.number == attempt)
            )


def _query(job, host, verdict, since_ns, until_ns, reason=None, exact_host=None, q=None):
    """The attempts that match the filters, with their stored verdict and root cause (Attempts.page)."""
    n_dumps = select(func.count(Dump.id)).where(Dump.attempt_id == Attempt.id).scalar_subquery()
    root = (select(CulpritRow.rank, CulpritRow.host, CulpritRow.reason, CulpritRow.incident_id)
            .where(CulpritRow.position == 0).subquery())
    query = (
        select(Job.name, Attempt.number, IncidentRow.verdict, IncidentRow.summary, n_dumps, Attempt.started_ns,
               Attempt.last_seen_at, root.c.rank, root.c.host, root.c.reason, Attempt.id)
        .join(Attempt, Attempt.job_id == Job.id)
        .outerjoin(IncidentRow, IncidentRow.attempt_id == Attempt.id)
        .outerjoin(root, root.c.incident_id == IncidentRow.id)
    )
    if job is not None:
        query = query.where(Job.name == job)
    if verdict is not None:
        query = query.where(IncidentRow.verdict == verdict)
    if reason is not None:
        query = query.where(root.c.reason == reason)
    if host is not None:  # a part of the host's name, any case ("b03" finds gpu-b03)
        query = query.where(_host_contains(host.lower(), root))
    if exact_host is not None:
        query = query.where(select(Dump.id).where(Dump.attempt_id == Attempt.id, Dump.host == exact_host).exists()
                            | (root.c.host == exact_host))
    if q is not None and q.strip():
        query = query.where(_search(q.strip().lower(), root))
    if since_ns is not None:
        query = query.where(Attempt.started_ns >= since_ns)
    if until_ns is not None:
        query = query.where(Attempt.started_ns < until_ns)
    return query


def _host_contains(part: str, root):
    """A host of the attempt (one that left a dump, or its root cause's) has ``part`` in its name, any case."""
    return (select(Dump.id).where(Dump.attempt_id == Attempt.id,
                                  func.lower(Dump.host).contains(part, autoescape=True)).exists()
            | func.lower(root.c.host).contains(part, autoescape=True))


def _search(text: str, root):
    """What the jobs page's search box finds (``text`` in lower case): a part of the job's name, a part
    of a host's name, or a verdict's whole word ("hang" also finds every hang, whatever its job's name)."""
    found = func.lower(Job.name).contains(text, autoescape=True) | _host_contains(text, root)
    return found | (IncidentRow.verdict == text) if text in VERDICTS else found
