"""``catalog.notify``: the alerts' outbox (migration 0014). Per receiver (a destination, known by a hash of its
URL): what it was told of each attempt, the messages waiting for it, and what was delivered, failed or dropped.

The outbox is derived from the stored diagnoses, never fed by the analysis: a pass reads the diagnoses newer
than what a destination looked at (:meth:`Notify.candidates`), decides, and records its decisions in one
transaction that re-checks them (:meth:`Notify.record`), so two processes that pass at once enqueue each
message once. A message leaves the outbox in the transaction that counts it sent (:meth:`Notify.delivered`)."""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import datetime, timedelta

from sqlalchemy import and_, delete, func, insert, literal, or_, select, update

from frlake.catalog.db import Store, utcnow
from frlake.catalog.models import Attempt, IncidentRow, Job, NotifyDestination, NotifyMessage, NotifySeen
from frlake.entities import Diagnosis


@dataclass(frozen=True)
class Candidate:
    """A stored diagnosis a destination has not looked at yet, and what it was told of the attempt before."""

    job: str
    attempt: int
    revision: int
    diagnosed_at: datetime
    diagnosis: Diagnosis
    seen: tuple[int, datetime] | None  # the (revision, diagnosed_at) looked at before; None: never
    announced_verdict: str | None  # what was announced before (None: nothing)
    announced_culprit: str | None
    announced_partial: bool = False  # ... from a diagnosis made before every rank dumped


@dataclass(frozen=True)
class Decision:
    """What a pass decided for one candidate: look at it, and announce ``verdict``/``culprit`` with ``body`` (a
    message), or keep what was announced (``body`` None, ``keep`` True), or announce nothing (``body`` None)."""

    candidate: Candidate
    body: str | None = None
    delivery: str | None = None
    verdict: str | None = None
    culprit: str | None = None
    keep: bool = False
    partial: bool = False  # the message's diagnosis was made before every rank dumped


@dataclass(frozen=True)
class Pending:
    id: int
    delivery: str
    body: str
    tries: int


@dataclass(frozen=True)
class DestinationStatus:
    key: str
    label: str
    queued: int
    oldest_queued_at: datetime | None
    sent: int
    failed: int
    dropped: int
    last_sent_at: datetime | None
    last_error: str | None
    last_error_at: datetime | None

    def to_dict(self) -> dict:
        return {f: getattr(self, f) for f in self.__dataclass_fields__}


class Notify(Store):
    """``catalog.notify``."""

    def destination(self, key: str, label: str) -> int:
        """The destination's id, created on first use. A new destination starts from what the lake holds: the
        diagnoses stored before it existed are looked at, not announced (adding a receiver to a lake of a
        year's incidents posts none of them)."""
        with self.session(write=True) as s:
            found = s.scalar(select(NotifyDestination.id).where(NotifyDestination.key == key))
            if found is not None:
                return found
            row = NotifyDestination(key=key, label=label[:512], created_at=utcnow())
            s.add(row)
            s.flush()
            s.execute(insert(NotifySeen).from_select(
                ["destination_id", "job", "attempt", "revision", "diagnosed_at"],
                select(literal(row.id), Job.name, Attempt.number, IncidentRow.attempt_revision,
                       IncidentRow.diagnosed_at)
                .join(Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)))
            return row.id

    def candidates(self, destination_id: int, limit: int = 500) -> list[Candidate]:
        """The stored diagnoses the destination has not looked at (new attempts, new revisions, diagnoses made
        again), oldest first."""
        seen = NotifySeen
        q = (select(Job.name, Attempt.number, IncidentRow.attempt_revision, IncidentRow.diagnosed_at,
                    IncidentRow.report, seen.revision, seen.diagnosed_at, seen.verdict, seen.culprit, seen.partial)
             .join(Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)
             .outerjoin(seen, and_(seen.destination_id == destination_id, seen.job == Job.name,
                                   seen.attempt == Attempt.number))
             .where(or_(seen.id.is_(None), seen.revision != IncidentRow.attempt_revision,
                        seen.diagnosed_at != IncidentRow.diagnosed_at))
             .order_by(IncidentRow.diagnosed_at, Job.name, Attempt.number).limit(limit))
        with self.session() as s:
            rows = s.execute(q).all()
        return [Candidate(job, attempt, revision or 0, at, Diagnosis.from_dict(json.loads(report)),
                          None if seen_rev is None else (seen_rev, seen_at), verdict, culprit, bool(partial))
                for job, attempt, revision, at, report, seen_rev, seen_at, verdict, culprit, partial in rows]

    def record(self, destination_id: int, decisions: list[Decision], max_queue: int) -> int:
        """Record the decisions in one transaction: each attempt's look, and its message queued. A decision
        whose attempt another process looked at meanwhile is skipped (it decided the same). Past ``max_queue``
        waiting messages the oldest are dropped, counted and shown. Returns the messages queued."""
        now = utcnow()
        queued = 0
        with self.session(write=True) as s:
            # the destination's row locked (PostgreSQL; SQLite writers take turns): passes take turns
            s.execute(select(NotifyDestination.id).where(NotifyDestination.id == destination_id).with_for_update())
            for d in decisions:
                c = d.candidate
                row = s.execute(select(NotifySeen.id, NotifySeen.revision, NotifySeen.diagnosed_at).where(
                    NotifySeen.destination_id == destination_id, NotifySeen.job == c.job,
                    NotifySeen.attempt == c.attempt)).first()
                if (None if row is None else (row[1], row[2])) != c.seen:
                    continue  # another pass got here first
                values = {"revision": c.revision, "diagnosed_at": c.diagnosed_at}
                if not d.keep:
                    values |= {"verdict": d.verdict, "culprit": d.culprit, "partial": d.partial}
                if row is None:
                    s.execute(insert(NotifySeen).values(destination_id=destination_id, job=c.job,
                                                         attempt=c.attempt, **values))
                else:
                    s.execute(update(NotifySeen).where(NotifySeen.id == row[0]).values(**values))
                if d.body is not None:
                    s.execute(insert(NotifyMessage).values(
                        destination_id=destination_id, delivery=d.delivery, job=c.job, attempt=c.attempt,
                        body=d.body, created_at=now, tries=0, next_try_at=now))
                    queued += 1
            waiting = s.scalar(select(func.count()).select_from(NotifyMessage)
                               .where(NotifyMessage.destination_id == destination_id))
            if waiting > max_queue:
                over = waiting - max_queue
                oldest = select(NotifyMessage.id).where(NotifyMessage.destination_id == destination_id) \
                    .order_by(NotifyMessage.id).limit(over)
                ids = [i for (i,) in s.execute(oldest)]
                s.execute(delete(NotifyMessage).where(NotifyMessage.id.in_(ids)))
                s.execute(update(NotifyDestination).where(NotifyDestination.id == destination_id).values(
                    dropped=NotifyDestination.dropped + len(ids), last_error_at=now,
                    last_error=f"the queue holds at most {max_queue} messages: the {len(ids)} oldest were dropped"))
        return queued

    def due(self, destination_id: int, lease_s: float, limit: int = 50) -> list[Pending]:
        """The messages due now, oldest first, each leased for ``lease_s`` (another process does not send them
        meanwhile; a process that dies while sending leaves them due again when the lease ends)."""
        now = utcnow()
        with self.session(write=True) as s:
            rows = s.execute(select(NotifyMessage.id, NotifyMessage.delivery, NotifyMessage.body, NotifyMessage.tries)
                             .where(NotifyMessage.destination_id == destination_id, NotifyMessage.next_try_at <= now)
                             .order_by(NotifyMessage.id).limit(limit).with_for_update(skip_locked=True)).all()
            if rows:
                s.execute(update(NotifyMessage).where(NotifyMessage.id.in_([r[0] for r in rows]))
                          .values(next_try_at=now + timedelta(seconds=lease_s)))
        return [Pending(*r) for r in rows]

    def release(self, message_ids: list[int], after_s: float = 0.0) -> None:
        """End the lease of messages not tried: due again in ``after_s``."""
        if message_ids:
            with self.session(write=True) as s:
                s.execute(update(NotifyMessage).where(NotifyMessage.id.in_(message_ids))
                          .values(next_try_at=utcnow() + timedelta(seconds=after_s)))

    def delivered(self, destination_id: int, message_id: int) -> bool:
        """The receiver took the message: it leaves the outbox and is counted sent, in one transaction."""
        now = utcnow()
        with self.session(write=True) as s:
            of = s.execute(select(NotifyMessage.job, NotifyMessage.attempt).where(NotifyMessage.id == message_id)).first()
            gone = s.execute(delete(NotifyMessage).where(NotifyMessage.id == message_id)).rowcount
            if gone:
                s.execute(update(NotifyDestination).where(NotifyDestination.id == destination_id).values(
                    sent=NotifyDestination.sent + 1, last_sent_at=now))
                s.execute(update(NotifySeen).where(NotifySeen.destination_id == destination_id,
                                                   NotifySeen.job == of[0], NotifySeen.attempt == of[1])
                          .values(sent_at=now))
        return bool(gone)

    def sent_at(self, job: str, attempt: int) -> datetime | None:
        """When a receiver last took a message of the attempt (None: never)."""
        with self.session() as s:
            return s.scalar(select(func.max(NotifySeen.sent_at)).where(NotifySeen.job == job,
                                                                        NotifySeen.attempt == attempt))

    def failed(self, destination_id: int, message_id: int, error: str, retry_in_s: float | None) -> None:
        """A try failed: counted, its error kept; tried again in ``retry_in_s``, or given up (None) and
        counted dropped."""
        now = utcnow()
        error = error[:2000]
        with self.session(write=True) as s:
            if retry_in_s is None:
                gone = s.execute(delete(NotifyMessage).where(NotifyMessage.id == message_id)).rowcount
            else:
                gone = 0
                s.execute(update(NotifyMessage).where(NotifyMessage.id == message_id).values(
                    tries=NotifyMessage.tries + 1, last_error=error,
                    next_try_at=now + timedelta(seconds=retry_in_s)))
            s.execute(update(NotifyDestination).where(NotifyDestination.id == destination_id).values(
                failed=NotifyDestination.failed + 1, dropped=NotifyDestination.dropped + gone,
                last_error=error, last_error_at=now))

    def status(self) -> list[DestinationStatus]:
        """Every destination: its queue, what was sent, failed and dropped, and its last error."""
        queue = (select(NotifyMessage.destination_id, func.count().label("n"),
                        func.min(NotifyMessage.created_at).label("oldest"))
                 .group_by(NotifyMessage.destination_id).subquery())
        d = NotifyDestination
        q = (select(d.key, d.label, func.coalesce(queue.c.n, 0), queue.c.oldest, d.sent, d.failed, d.dropped,
                    d.last_sent_at, d.last_error, d.last_error_at)
             .outerjoin(queue, queue.c.destination_id == d.id).order_by(d.id))
        with self.session() as s:
            rows = s.execute(q).all()
        return [DestinationStatus(*(_aware(v) if isinstance(v, datetime) else v for v in r)) for r in rows]


def _aware(value: datetime) -> datetime:
    """A time read back from SQLite, which keeps none of its zone: UTC, as every time frlake writes."""
    from datetime import UTC

    return value if value.tzinfo else value.replace(tzinfo=UTC)
