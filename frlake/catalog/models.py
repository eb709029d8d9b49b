"""SQLAlchemy models of the catalog. The schema itself is created and changed
only by the Alembic migrations in :mod:`frlake.migrations`; these models must
match them (a test compares the migrated schema with this metadata)."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import (
    BigInteger,
    Boolean,
    DateTime,
    Float,
    ForeignKey,
    Index,
    Integer,
    MetaData,
    String,
    Text,
    UniqueConstraint,
)
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column

NAMING_CONVENTION = {
    "ix": "ix_%(column_0_label)s",
    "uq": "uq_%(table_name)s_%(column_0_name)s",
    "ck": "ck_%(table_name)s_%(constraint_name)s",
    "fk": "fk_%(table_name)s_%(column_0_name)s_%(referred_table_name)s",
    "pk": "pk_%(table_name)s",
}


class Base(DeclarativeBase):
    metadata = MetaData(naming_convention=NAMING_CONVENTION)


class IngestRun(Base):
    __tablename__ = "ingest_runs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    finished_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    status: Mapped[str] = mapped_column(String(16))  # running | finished | failed
    sources: Mapped[str] = mapped_column(Text)  # JSON list of the paths given
    options: Mapped[str] = mapped_column(Text)  # JSON of the identity options
    n_ingested: Mapped[int] = mapped_column(Integer, default=0)
    n_duplicate: Mapped[int] = mapped_column(Integer, default=0)
    n_rejected: Mapped[int] = mapped_column(Integer, default=0)
    n_unchanged: Mapped[int] = mapped_column(Integer, default=0)


class Job(Base):
    __tablename__ = "jobs"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    name: Mapped[str] = mapped_column(String(512), unique=True)
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class Attempt(Base):
    __tablename__ = "attempts"
    __table_args__ = (UniqueConstraint("job_id", "number"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    job_id: Mapped[int] = mapped_column(ForeignKey("jobs.id"))
    number: Mapped[int] = mapped_column(BigInteger)
    first_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # Earliest and latest time_created of any entry in the attempt's dumps.
    started_ns: Mapped[int | None] = mapped_column(BigInteger)
    ended_ns: Mapped[int | None] = mapped_column(BigInteger)
    # Goes up with every commit that adds dumps; a diagnosis older than it is pending.
    revision: Mapped[int] = mapped_column(BigInteger, server_default="0")


class Dump(Base):
    """One ingested dump: distinct bytes (sha256), stored once in the lake."""

    __tablename__ = "dumps"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64), unique=True)
    dump_id: Mapped[int] = mapped_column(BigInteger, index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(512), index=True)
    fr_version: Mapped[str | None] = mapped_column(String(32))
    encoding: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    n_entries: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class SourceFile(Base):
    """A file (or archive member) seen at a path, one row per distinct content."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_path_current", "path", "is_current"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16))  # ingested | duplicate | rejected
    reason: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)
    job: Mapped[str | None] = mapped_column(String(512))
    attempt: Mapped[int | None] = mapped_column(BigInteger)
    host: Mapped[str | None] = mapped_column(String(512))
    rank: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    is_current: Mapped[bool] = mapped_column(Boolean)


class LakeFile(Base):
    """A Parquet file of the lake. Only committed files are visible to queries;
    pending ones are a publication in progress, undone by recovery after a crash."""

    __tablename__ = "lake_files"
    __table_args__ = (Index("ix_lake_files_table_status", "table_name", "status"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)  # relative to the lake folder
    job: Mapped[str | None] = mapped_column(String(512))
    attempt: Mapped[int | None] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    status: Mapped[str] = mapped_column(String(16))  # pending | committed
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class IncidentRow(Base):
    """The current diagnosis of one attempt (replaced when it is recomputed)."""

    __tablename__ = "incidents"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), unique=True)
    verdict: Mapped[str] = mapped_column(String(16), index=True)
    summary: Mapped[str] = mapped_column(Text)
    world_size: Mapped[int] = mapped_column(Integer)
    n_dumps: Mapped[int] = mapped_column(Integer)
    algorithm_version: Mapped[int] = mapped_column(Integer)
    diagnosed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    report: Mapped[str] = mapped_column(Text)  # the full diagnosis as JSON
    attempt_revision: Mapped[int] = mapped_column(BigInteger, server_default="0")  # the revision it saw


class StackId(Base):
    """A stack id stored in the lake's ``stacks`` table (each stack is stored once)."""

    __tablename__ = "stack_ids"
    stack_id: Mapped[int] = mapped_column(BigInteger, primary_key=True, autoincrement=False)


class CulpritRow(Base):
    __tablename__ = "culprits"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    position: Mapped[int] = mapped_column(Integer)  # 0 is the root cause
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(512), index=True)
    reason: Mapped[str] = mapped_column(String(32))
    role: Mapped[str] = mapped_column(String(16))
    pg: Mapped[str | None] = mapped_column(String(512))
    pg_desc: Mapped[str | None] = mapped_column(String(512))
    seq: Mapped[int | None] = mapped_column(BigInteger)
    op: Mapped[str | None] = mapped_column(String(64))
    lateness_ms: Mapped[float | None] = mapped_column(Float)
    stack_signature: Mapped[str | None] = mapped_column(String(64))
    top_frame: Mapped[str | None] = mapped_column(Text)


class RankStat(Base):
    """How late one rank arrived to collectives in one attempt (the notable
    ranks only: every rank with unexplained late arrivals, and the latest few)."""

    __tablename__ = "rank_stats"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    incident_id: Mapped[int] = mapped_column(ForeignKey("incidents.id", ondelete="CASCADE"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(512), index=True)
    collectives: Mapped[int] = mapped_column(Integer)
    arrived_last: Mapped[int] = mapped_column(Integer)
    late_p50_ms: Mapped[float] = mapped_column(Float)
    late_p90_ms: Mapped[float] = mapped_column(Float)
    late_max_ms: Mapped[float] = mapped_column(Float)
    root_late_events: Mapped[int] = mapped_column(Integer)
    root_late_ms: Mapped[float | None] = mapped_column(Float)
