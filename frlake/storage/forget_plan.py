"""The catalog's side of forget: what a selection holds, and the one
transaction that switches the lake from the old files to the new and drops
the forgotten dumps' records (docs/lake.md, "Lifecycle")."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from sqlalchemy import delete, func, insert, or_, select, update

from frlake.catalog.db import chunks, utcnow
from frlake.catalog.models import (
    Attempt,
    CulpritRow,
    Dump,
    HostClaim,
    IncidentRow,
    Job,
    LauncherFailure,
    RankStat,
    RetiredFile,
    SourceFile,
)
from frlake.catalog.store import Catalog
from frlake.storage.files import CommittedFile, switch
from frlake.storage.lake import raw_rel_path


@dataclass(frozen=True)
class ForgetSelector:
    """What to forget; the conditions add up (all must hold). ``before``: whole
    attempts whose last entry (or, without one, last ingest) is older."""

    job: str | None = None
    attempt: int | None = None
    path: str | None = None  # a source file, or a folder: every file under it
    before: datetime | None = None

    def is_empty(self) -> bool:
        return self.job is None and self.attempt is None and self.path is None and self.before is None


@dataclass(frozen=True)
class DumpRef:
    id: int
    sha256: str
    dump_id: int
    job: str
    attempt: int
    size_bytes: int


@dataclass
class ForgetPlan:
    dumps: list[DumpRef] = field(default_factory=list)
    whole: list[tuple[str, int]] = field(default_factory=list)  # attempts that lose every dump
    partial: dict[tuple[str, int], set[int]] = field(default_factory=dict)  # attempt -> dump_ids to drop

    @property
    def attempts(self) -> list[tuple[str, int]]:
        return sorted(set(self.whole) | set(self.partial))


def _path_condition(column, path: str):
    folder = path.rstrip("/")
    return or_(column == path, column.startswith(folder + "/", autoescape=True))


def forget_plan(catalog: Catalog, sel: ForgetSelector) -> ForgetPlan:
    """The dumps a selection holds, and which attempts lose all of them."""
    q = (select(Dump.id, Dump.sha256, Dump.dump_id, Job.name, Attempt.number, Dump.size_bytes, Attempt.id)
         .join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id))
    if sel.job is not None:
        q = q.where(Job.name == sel.job)
    if sel.attempt is not None:
        q = q.where(Attempt.number == sel.attempt)
    if sel.before is not None:
        cutoff_ns = int(sel.before.timestamp() * 1e9)
        q = q.where(or_(Attempt.ended_ns < cutoff_ns,
                        Attempt.ended_ns.is_(None) & (Attempt.last_seen_at < sel.before)))
    if sel.path is not None:
        ingested_there = (select(SourceFile.id).where(
            SourceFile.is_current.is_(True), SourceFile.status == "ingested", SourceFile.sha256 == Dump.sha256,
            SourceFile.job == Job.name, SourceFile.attempt == Attempt.number,
            _path_condition(SourceFile.path, sel.path)).exists())
        q = q.where(ingested_there)
    plan = ForgetPlan()
    with catalog.session() as s:
        rows = s.execute(q.order_by(Job.name, Attempt.number, Dump.id)).all()
        plan.dumps = [DumpRef(*r[:6]) for r in rows]
        chosen: dict[int, list] = {}
        for r in rows:
            chosen.setdefault(r[6], []).append(r)
        totals = dict(s.execute(select(Dump.attempt_id, func.count(Dump.id))
                                .where(Dump.attempt_id.in_(list(chosen))).group_by(Dump.attempt_id)).all()) \
            if chosen else {}
    for attempt_id, picked in chosen.items():
        key = (picked[0][3], picked[0][4])
        if len(picked) == totals.get(attempt_id, 0):
            plan.whole.append(key)
        else:
            plan.partial[key] = {r[2] for r in picked}
    return plan


def commit_forget(catalog: Catalog, run_id: int, new_ids: Sequence[int], plan: ForgetPlan,
                  old: Sequence[CommittedFile]) -> None:
    """One transaction: the rewritten files appear, the old ones and every
    file of the attempts that go are retired, the dumps, diagnoses and
    attempts go, the files that held them are remembered as forgotten,
    and the raw bytes no dump refers to any more are retired."""
    now = utcnow()
    with catalog.session(write=True) as s:
        switch(s, new_ids, old, now)
        for chunk in chunks([d.id for d in plan.dumps]):
            s.execute(delete(Dump).where(Dump.id.in_(chunk)))
        by_attempt: dict[tuple[str, int], list[str]] = {}
        for d in plan.dumps:
            by_attempt.setdefault((d.job, d.attempt), []).append(d.sha256)
        for (job, number), shas in by_attempt.items():
            for chunk in chunks(sorted(set(shas))):
                s.execute(update(SourceFile).where(
                    SourceFile.is_current.is_(True), SourceFile.sha256.in_(chunk),
                    SourceFile.status.in_(("ingested", "duplicate")),
                    or_(SourceFile.job.is_(None), (SourceFile.job == job) & (SourceFile.attempt == number)),
                ).values(status="forgotten", reason=None, run_id=run_id, seen_at=now,
                         detail=f"its dump was forgotten (run {run_id}); an ingest with other identity "
                                "options, or with --force, reads it again"))
        for job, number in plan.whole:
            attempt_id = s.scalar(select(Attempt.id).join(Job, Job.id == Attempt.job_id)
                                  .where(Job.name == job, Attempt.number == number))
            incident = select(IncidentRow.id).where(IncidentRow.attempt_id == attempt_id).scalar_subquery()
            s.execute(delete(CulpritRow).where(CulpritRow.incident_id == incident))
            s.execute(delete(RankStat).where(RankStat.incident_id == incident))
            s.execute(delete(IncidentRow).where(IncidentRow.attempt_id == attempt_id))
            s.execute(delete(HostClaim).where(HostClaim.attempt_id == attempt_id))
            s.execute(delete(LauncherFailure).where(LauncherFailure.attempt_id == attempt_id))
            s.execute(delete(Attempt).where(Attempt.id == attempt_id))
        for job in sorted({j for j, _ in plan.whole}):
            s.execute(delete(Job).where(Job.name == job,
                                        ~select(Attempt.id).where(Attempt.job_id == Job.id).exists()))
        for job, number in plan.partial:
            s.execute(update(Attempt).where(
                Attempt.number == number, Attempt.job_id == select(Job.id).where(Job.name == job).scalar_subquery()
            ).values(revision=Attempt.revision + 1, diagnosis_due=True))
        shas = sorted({d.sha256 for d in plan.dumps})
        still = set()
        for chunk in chunks(shas):
            still.update(s.scalars(select(Dump.sha256).where(Dump.sha256.in_(chunk))))
        gone = [sha for sha in shas if sha not in still]
        if gone:
            s.execute(insert(RetiredFile), [
                {"path": raw_rel_path(sha), "kind": "raw", "sha256": sha, "retired_at": now}
                for sha in gone])
