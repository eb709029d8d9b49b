"""The stored diagnoses: one per attempt, made from what the attempt held at a revision, with its culprits
and the notable ranks' lateness; which attempts' diagnoses are due; a user's mark that an attempt is
complete."""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from datetime import datetime

from sqlalchemy import delete, func, insert, select, true, tuple_, update
from sqlalchemy.orm import Session

from frlake.catalog.db import Store, chunks, utcnow
from frlake.catalog.models import Attempt, CulpritRow, Dump, IncidentRow, Job, RankStat, SourceFile
from frlake.catalog.seen import CLAIMED_TWICE
from frlake.entities import Diagnosis, stack_signature, stall_signature, top_frame


class Diagnoses(Store):
    """``catalog.diagnoses``."""

    def save(self, diag: Diagnosis, revision: int = 0, also: Callable[[Session], None] | None = None) -> bool:
        """Store (or replace) the diagnosis of one attempt, made from what the
        attempt held at ``revision``: the report, its culprits (with their
        stack signatures) and the notable ranks' lateness. ``also``: the
        storage wing's switch of lake files (the attempt's summary tables,
        frlake.storage.summary_tables), in the same transaction. Returns False,
        storing nothing, when the attempt is gone or holds a diagnosis made
        from a newer revision."""
        with self.session(write=True) as s:
            stored = _save_many(s, [(diag, revision)], utcnow())[0]
            if stored and also is not None:
                also(s)
            return stored

    def save_many(self, items: Sequence[tuple[Diagnosis, int]],
                  also: Callable[[Session, list[bool]], None] | None = None) -> list[bool]:
        """:meth:`save` of several attempts' diagnoses (each with the revision it was made from) in one
        transaction, the attempts' rows locked in key order; whether each was stored. ``also(session,
        stored)`` runs in the same transaction after them (it may raise to store none)."""
        now = utcnow()
        with self.session(write=True) as s:
            if len({(d.job, d.attempt) for d, _ in items}) < len(items):  # one attempt twice: stored in turn
                order = sorted(range(len(items)), key=lambda i: (items[i][0].job, items[i][0].attempt))
                stored = [False] * len(items)
                for i in order:
                    stored[i] = _save_many(s, [items[i]], now)[0]
            else:
                stored = _save_many(s, items, now)
            if also is not None:
                also(s, stored)
        return stored

    def states(self, attempts: Sequence[tuple[str, int]]) -> dict[tuple[str, int], tuple[int, bool, bool, int]]:
        """:meth:`state` of several attempts, each with its number of dumps: one statement per 500 attempts
        (the attempts the lake has no longer are left out)."""
        copies = (select(SourceFile.id).where(SourceFile.job == Job.name, SourceFile.attempt == Attempt.number,
                                              SourceFile.reason == CLAIMED_TWICE).exists())
        dumps = select(func.count(Dump.id)).where(Dump.attempt_id == Attempt.id).scalar_subquery()
        q = (select(Job.name, Attempt.number, Attempt.revision, Attempt.diagnosis_due, copies, dumps)
             .join(Job, Job.id == Attempt.job_id))
        with self.session() as s:
            rows = [r for chunk in chunks(sorted(set(attempts)), 500)
                    for r in s.execute(q.where(tuple_(Job.name, Attempt.number).in_(chunk))).all()]
        return {(job, number): (revision or 0, bool(due), bool(copy), n)
                for job, number, revision, due, copy, n in rows}

    def get(self, job: str, attempt: int) -> Diagnosis | None:
        """The stored diagnosis of an attempt (None if it has none)."""
        with self.session() as s:
            report = s.scalar(
                select(IncidentRow.report).join(Attempt, Attempt.id == IncidentRow.attempt_id)
                .join(Job, Job.id == Attempt.job_id).where(Job.name == job, Attempt.number == attempt)
            )
        return Diagnosis.from_dict(json.loads(report)) if report else None

    def diagnosed_at(self, job: str, attempt: int) -> datetime | None:
        """When the stored diagnosis of the attempt was made (None: it has none)."""
        with self.session() as s:
            return s.scalar(select(IncidentRow.diagnosed_at).join(Attempt, Attempt.id == IncidentRow.attempt_id)
                            .join(Job, Job.id == Attempt.job_id).where(Job.name == job, Attempt.number == attempt))

    def state(self, job: str, attempt: int) -> tuple[int, bool, bool] | None:
        """The attempt's revision, whether its diagnosis is due, and whether
        a file holds a copy of one of its dumps in another place (see
        ``catalog.dumps.claimed_twice``); None if the lake has no such attempt.
        Not due: the stored diagnosis, and the summary tables stored with it,
        are of this revision."""
        copies = select(SourceFile.id).where(
            SourceFile.job == job, SourceFile.attempt == attempt, SourceFile.reason == CLAIMED_TWICE).exists()
        with self.session() as s:
            row = s.execute(
                select(Attempt.revision, Attempt.diagnosis_due, copies).join(Job, Job.id == Attempt.job_id)
                .where(Job.name == job, Attempt.number == attempt)
            ).first()
        return None if row is None else (row[0] or 0, bool(row[1]), bool(row[2]))

    def pending(self) -> list[tuple[str, int]]:
        """Attempts whose stored diagnosis is missing or older than their dumps."""
        q = (
            select(Job.name, Attempt.number)
            .join(Attempt, Attempt.job_id == Job.id)
            .where(Attempt.diagnosis_due.is_(true()))  # an index: the pending ones only, however big the lake
            .order_by(Job.name, Attempt.number)
        )
        with self.session() as s:
            return [tuple(r) for r in s.execute(q)]

    def unsettled(self, since) -> list[tuple[str, int, datetime]]:
        """The attempts diagnosed since ``since`` with fewer dumps than their world has ranks and no mark that
        they are complete, and when their newest dump was ingested: a watch that restarts settles them."""
        q = (select(Job.name, Attempt.number, IncidentRow.report, func.max(Dump.ingested_at))
             .join(Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)
             .join(Dump, Dump.attempt_id == Attempt.id)
             .where(IncidentRow.diagnosed_at >= since, IncidentRow.n_dumps < IncidentRow.world_size)
             .group_by(Job.name, Attempt.number, IncidentRow.report))
        with self.session() as s:
            rows = s.execute(q).all()
        return [(job, number, at) for job, number, report, at in rows if json.loads(report).get("complete") is not True]

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


def _save_many(s: Session, items: Sequence[tuple[Diagnosis, int]], now) -> list[bool]:
    """:meth:`Diagnoses.save` of several attempts (each once) inside the transaction ``s``, by a few
    statements for all of them, whether each was stored. Each attempt's row is locked (PostgreSQL; SQLite
    writers take turns anyway), in key order, so two processes that diagnose the same attempt store one
    after the other, and an older view never replaces a newer one."""
    found = {}  # (job, attempt) -> (attempt id, the stored diagnosis' revision, the attempt's, due)
    for chunk in chunks(sorted((d.job, d.attempt) for d, _ in items), 500):
        rows = s.execute(
            select(Job.name, Attempt.number, Attempt.id, IncidentRow.attempt_revision, Attempt.revision,
                   Attempt.diagnosis_due)
            .join(Job, Job.id == Attempt.job_id).outerjoin(IncidentRow, IncidentRow.attempt_id == Attempt.id)
            .where(tuple_(Job.name, Attempt.number).in_(chunk))
            .order_by(Job.name, Attempt.number).with_for_update(of=Attempt)
        ).all()
        found.update({(job, number): rest for job, number, *rest in rows})
    stored, kept, due_now = [], [], {True: [], False: []}
    for diag, revision in items:
        row = found.get((diag.job, diag.attempt))
        ok = row is not None and (row[1] is None or row[1] <= revision)  # not gone, not older than the stored
        stored.append(ok)
        if ok:
            attempt_id, _, current, due = row
            kept.append((attempt_id, diag, revision))
            if due != (revision < (current or 0)):
                due_now[not due].append(attempt_id)
    for value, ids in due_now.items():
        for chunk in chunks(ids, 500):
            s.execute(update(Attempt).where(Attempt.id.in_(chunk)).values(diagnosis_due=value))
    for chunk in chunks([attempt_id for attempt_id, _, _ in kept], 500):
        old = select(IncidentRow.id).where(IncidentRow.attempt_id.in_(chunk))
        s.execute(delete(CulpritRow).where(CulpritRow.incident_id.in_(old)))
        s.execute(delete(RankStat).where(RankStat.incident_id.in_(old)))
        s.execute(delete(IncidentRow).where(IncidentRow.attempt_id.in_(chunk)))
    if not kept:
        return stored
    made = s.execute(insert(IncidentRow).returning(IncidentRow.id, IncidentRow.attempt_id), [
        dict(attempt_id=attempt_id, verdict=diag.verdict.value, summary=diag.summary, world_size=diag.world_size,
             n_dumps=len(diag.ranks_dumped), algorithm_version=diag.algorithm_version, diagnosed_at=now,
             report=json.dumps(diag.to_dict(), default=str), attempt_revision=revision, kind=diag.kind)
        for attempt_id, diag, revision in kept]).all()
    incident_of = {attempt_id: incident_id for incident_id, attempt_id in made}
    culprits = [_culprit_row(incident_of[attempt_id], i, c) for attempt_id, diag, _ in kept
                for i, c in enumerate(diag.culprits)]
    stats = [dict(incident_id=incident_of[attempt_id], **r) for attempt_id, diag, _ in kept for r in diag.rank_lateness]
    if culprits:
        s.execute(insert(CulpritRow), culprits)
    if stats:
        s.execute(insert(RankStat), stats)
    return stored


def _culprit_row(incident_id: int, position: int, c) -> dict:
    """A culprit's row of the ``culprits`` table."""
    return dict(incident_id=incident_id, position=position, rank=c.rank, host=c.host, reason=c.reason, role=c.role,
                pg=c.pg, pg_desc=c.pg_desc, seq=c.seq, op=c.op, lateness_ms=c.lateness_ms,
                stack_signature=stack_signature(c.stack), stall_signature=stall_signature(c.stack),
                top_frame=top_frame(c.stack), evidence=c.evidence, host_inferred=c.host_inferred,
                host_placement=c.host_placement,
                **{k: (c.cost or {}).get(k) for k in ("wait_ms", "wait_per_step_ms", "step_without_ms")})
