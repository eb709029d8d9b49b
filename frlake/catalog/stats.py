"""``catalog.stats``: the lake's numbers as a monitoring system reads them (``GET /metrics``): counts by kind,
bytes, the runs and their last duration. A few grouped counts, each over an indexed or small table, so that
a scrape costs the same whoever asks, and every process of a server gives the same numbers."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import func, select

from frlake.catalog.db import Store
from frlake.catalog.models import Attempt, Dump, IncidentRow, IngestRun, LakeFile, SourceFile


@dataclass(frozen=True)
class LakeStats:
    attempts: int
    dumps: int
    incidents_by_verdict: dict[str, int]
    rejected_by_reason: dict[str, int]  # the files seen whose latest record is a rejection
    runs: dict[tuple[str, str], int]  # (kind, status) -> runs
    last_run: dict[str, tuple[datetime, float]]  # kind -> (finished at, seconds) of its newest finished run
    parquet_bytes: int  # the committed Parquet files
    dumps_bytes: int  # the original dumps as they were read, each distinct content once
    raw_bytes: int | None = None  # their compressed copies on disk (the session measures the lake's raw/ folder)


class Stats(Store):
    """``catalog.stats``."""

    def snapshot(self) -> LakeStats:
        with self.session() as s:
            attempts = s.scalar(select(func.count()).select_from(Attempt)) or 0
            dumps = s.scalar(select(func.count()).select_from(Dump)) or 0
            verdicts = dict(s.execute(select(IncidentRow.verdict, func.count()).group_by(IncidentRow.verdict)).all())
            rejected = dict(s.execute(
                select(func.coalesce(SourceFile.reason, "unknown"), func.count())
                .where(SourceFile.is_current.is_(True), SourceFile.status == "rejected")
                .group_by(func.coalesce(SourceFile.reason, "unknown"))).all())
            runs = {(k, st): n for k, st, n in s.execute(
                select(IngestRun.kind, IngestRun.status, func.count()).group_by(IngestRun.kind, IngestRun.status))}
            newest = select(IngestRun.kind, func.max(IngestRun.id).label("id")).where(
                IngestRun.finished_at.is_not(None)).group_by(IngestRun.kind).subquery()
            last = {kind: (finished, max(0.0, (_aware(finished) - _aware(started)).total_seconds()))
                    for kind, started, finished in s.execute(
                        select(IngestRun.kind, IngestRun.started_at, IngestRun.finished_at)
                        .join(newest, newest.c.id == IngestRun.id))}
            parquet = s.scalar(select(func.coalesce(func.sum(LakeFile.bytes), 0))
                               .where(LakeFile.status == "committed")) or 0
            distinct = select(Dump.sha256, func.max(Dump.size_bytes).label("size")).group_by(Dump.sha256).subquery()
            raw = s.scalar(select(func.coalesce(func.sum(distinct.c.size), 0))) or 0
        return LakeStats(attempts, dumps, verdicts, rejected, runs, last, int(parquet), int(raw))


def _aware(value: datetime) -> datetime:
    from datetime import UTC

    return value if value.tzinfo else value.replace(tzinfo=UTC)
