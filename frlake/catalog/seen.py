"""What the catalog knows of the source files: each path's latest state (``files``), what an ingest judged
of it and when, so that an unchanged file is not read again."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from frlake.catalog.db import Store, chunks
from frlake.catalog.models import SourceFile

_FILE_COLUMNS = ("path", "size", "mtime_ns", "sha256", "status", "reason", "detail", "job", "attempt", "host", "rank",
                 "options_key", "frlake_version")

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


class SeenFiles(Store):
    """``catalog.files``: the source files seen. They are recorded with the dumps they hold, in one
    transaction (``catalog.dumps.commit``)."""

    def current(self, paths: Sequence[str]) -> dict[str, FileState]:
        """The latest known state of each path (unknown paths are absent)."""
        found: dict[str, FileState] = {}
        with self.session() as s:
            for chunk in chunks(list(paths)):
                rows = s.execute(
                    select(SourceFile.path, SourceFile.size, SourceFile.mtime_ns, SourceFile.sha256, SourceFile.status,
                           SourceFile.reason, SourceFile.options_key, SourceFile.frlake_version)
                    .where(SourceFile.path.in_(chunk), SourceFile.is_current.is_(True))
                )
                for row in rows:
                    found[row.path] = FileState(*row)
        return found

    def records(self, *, status: str | None = None, limit: int | None = None) -> list[FileRecord]:
        """The latest record of every path (of ``status`` only, when given), by path."""
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


def record(s: Session, run_id: int, files: Sequence[FileRecord], now: datetime) -> None:
    """In a transaction: each file's record becomes its path's current one (the same bytes again update it)."""
    if not files:
        return
    current: dict[str, SourceFile] = {}
    for chunk in chunks([f.path for f in files]):
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
