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
    false,
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
    kind: Mapped[str] = mapped_column(String(16), server_default="ingest")  # ingest | forget | compact | diagnose


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
    # Set when the revision goes up, cleared when a diagnosis is stored at it (migration 0007): the
    # pending diagnoses are found through its index, whatever the size of the lake.
    diagnosis_due: Mapped[bool] = mapped_column(Boolean, server_default=false(), index=True)


class Dump(Base):
    """One ingested dump: distinct bytes (sha256) in one attempt. The same
    bytes found in another attempt's folder are a second row (the raw bytes
    are stored once in the lake)."""

    __tablename__ = "dumps"
    __table_args__ = (UniqueConstraint("sha256", "attempt_id", name="uq_dumps_sha256_attempt_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    sha256: Mapped[str] = mapped_column(String(64))
    dump_id: Mapped[int] = mapped_column(BigInteger, index=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(512), index=True)  # NULL: no source named it (0018)
    fr_version: Mapped[str | None] = mapped_column(String(32))
    encoding: Mapped[str] = mapped_column(String(16))
    size_bytes: Mapped[int] = mapped_column(BigInteger)
    n_entries: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    # its oldest entry's record id and time (0020): a flat folder's rewritten file is a new process or not
    first_record_id: Mapped[int | None] = mapped_column(BigInteger)
    first_ns: Mapped[int | None] = mapped_column(BigInteger)


class HostClaim(Base):
    """What one source says of the host of one rank of an attempt (0018): a host map found beside the dumps
    (frlake.ingest.hostmaps) or attached later (``frlake hosts attach``). A dump whose own place names no
    host takes the first claim's (by precedence, then name); claims that name another host stay, and the
    diagnosis names them. ``attach_id`` groups the claims of one attach, which ``frlake hosts detach``
    removes; NULL for claims read at ingest."""

    __tablename__ = "host_claims"
    __table_args__ = (Index("ix_host_claims_attempt_rank", "attempt_id", "rank"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    host: Mapped[str] = mapped_column(String(512))
    source: Mapped[str] = mapped_column(String(32))  # hostmaps.SOURCES: hosts table, torchrun log, hostfile, slurm
    precedence: Mapped[int] = mapped_column(Integer)  # lower wins
    path: Mapped[str] = mapped_column(Text)  # the file it was read from
    attach_id: Mapped[str | None] = mapped_column(String(32), index=True)
    claimed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))


class LauncherFailure(Base):
    """A worker the launcher saw fail (0018): a torchrun failure summary's entry, read from a log beside the
    dumps. The diagnosis says how a rank that left no dump died."""

    __tablename__ = "launcher_failures"
    __table_args__ = (UniqueConstraint("attempt_id", "rank", "path", name="uq_launcher_failures_attempt_rank_path"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    attempt_id: Mapped[int] = mapped_column(ForeignKey("attempts.id"), index=True)
    rank: Mapped[int] = mapped_column(Integer)
    local_rank: Mapped[int | None] = mapped_column(Integer)
    host: Mapped[str | None] = mapped_column(String(512))
    exitcode: Mapped[int | None] = mapped_column(Integer)
    pid: Mapped[int | None] = mapped_column(BigInteger)
    failed_at: Mapped[str | None] = mapped_column(String(32))  # as the log writes it: 2024-01-01_12:03:11 (local)
    error_file: Mapped[str | None] = mapped_column(Text)
    message: Mapped[str | None] = mapped_column(Text)  # the error file's message, or the traceback's last line
    traceback: Mapped[str | None] = mapped_column(Text)  # bounded (hostmaps.MAX_TRACEBACK)
    root_cause: Mapped[bool] = mapped_column(Boolean)  # the summary's "Root Cause (first observed failure)"
    path: Mapped[str] = mapped_column(Text)


class SourceFile(Base):
    """A file (or archive member) seen at a path, one row per distinct content."""

    __tablename__ = "files"
    __table_args__ = (Index("ix_files_path_current", "path", "is_current"), Index("ix_files_job_attempt", "job", "attempt"))
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)
    size: Mapped[int] = mapped_column(BigInteger)
    mtime_ns: Mapped[int] = mapped_column(BigInteger)
    sha256: Mapped[str | None] = mapped_column(String(64), index=True)
    status: Mapped[str] = mapped_column(String(16))  # ingested | duplicate | rejected | forgotten
    reason: Mapped[str | None] = mapped_column(String(64))
    detail: Mapped[str | None] = mapped_column(Text)
    job: Mapped[str | None] = mapped_column(String(512))
    attempt: Mapped[int | None] = mapped_column(BigInteger)
    host: Mapped[str | None] = mapped_column(String(512))
    rank: Mapped[int | None] = mapped_column(Integer)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    seen_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    is_current: Mapped[bool] = mapped_column(Boolean)
    # How the file was judged: a hash of the identity options, and the frlake version (pipeline._retry).
    options_key: Mapped[str | None] = mapped_column(String(16))
    frlake_version: Mapped[str | None] = mapped_column(String(32))


class LakeFile(Base):
    """A Parquet file of the lake (docs/lake.md, "Atomic publication").

    ``pending``: being published (at its hidden name, or not yet there), undone
    by recovery after a crash. ``publishing``: committed, not yet linked at
    ``path``. ``committed``: also at ``path``, where outside readers see it.
    frlake's views read the hidden name (:func:`frlake.storage.lake.hidden_path`)
    while ``hidden``, else ``path``."""

    __tablename__ = "lake_files"
    __table_args__ = (Index("ix_lake_files_table_status", "table_name", "status"),
                      Index("ix_lake_files_status", "status"),  # every run looks for pending files (0007)
                      Index("ix_lake_files_partition", "job", "attempt", "status"))  # an attempt's files (0016)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    table_name: Mapped[str] = mapped_column(String(32))
    path: Mapped[str] = mapped_column(Text)  # relative to the lake folder
    job: Mapped[str | None] = mapped_column(String(512))
    attempt: Mapped[int | None] = mapped_column(BigInteger)
    rows: Mapped[int] = mapped_column(BigInteger)
    bytes: Mapped[int] = mapped_column(BigInteger)
    run_id: Mapped[int] = mapped_column(ForeignKey("ingest_runs.id"))
    status: Mapped[str] = mapped_column(String(16))  # pending | publishing | committed
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    hidden: Mapped[bool] = mapped_column(Boolean, server_default=false())  # it has its hidden name too
    # the version of its table's schema it was written with (frlake.schema.SCHEMA_VERSIONS; 0011)
    schema_version: Mapped[int] = mapped_column(Integer, server_default="1")


class RetiredFile(Base):
    """A file of the lake that nothing refers to any more: a Parquet file that
    a forget or a compaction replaced, the hidden name of a published file, or
    raw bytes no dump refers to. Deleted by a later run once ``retired_at`` is
    older than the grace period (readers that opened views before may still
    read it)."""

    __tablename__ = "retired_files"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    path: Mapped[str] = mapped_column(Text)  # relative to the lake folder
    kind: Mapped[str] = mapped_column(String(16))  # parquet | raw
    sha256: Mapped[str | None] = mapped_column(String(64))  # raw: kept if a dump refers to it again
    retired_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)


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
    diagnosed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), index=True)  # Catalog.version
    report: Mapped[str] = mapped_column(Text)  # the full diagnosis as JSON
    attempt_revision: Mapped[int] = mapped_column(BigInteger, server_default="0")  # the revision it saw
    kind: Mapped[str | None] = mapped_column(String(24), index=True)  # entities.Kind; NULL: healthy (0017)


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
    stall_signature: Mapped[str | None] = mapped_column(String(64))  # the user frames' names: survives code changes
    top_frame: Mapped[str | None] = mapped_column(Text)
    evidence: Mapped[str | None] = mapped_column(String(32))  # NULL: direct; pending_tail, unnamed_peer, no_dump
    host_inferred: Mapped[bool | None] = mapped_column(Boolean)  # no file of the rank names its host
    # a straggler's cost (Culprit.cost, 0017): the others' wait over the dumps' window, per step, and the step
    # the job would take without it
    wait_ms: Mapped[float | None] = mapped_column(Float)
    wait_per_step_ms: Mapped[float | None] = mapped_column(Float)
    step_without_ms: Mapped[float | None] = mapped_column(Float)
    host_placement: Mapped[str | None] = mapped_column(String(8))  # an inferred host's: strong | weak (0017)


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


class NotifyDestination(Base):
    """A receiver of frlake's alerts (``--notify URL``), known by a hash of its URL (the URL itself, which may
    hold a webhook's secret, is not stored), with what was delivered to it (migration 0014)."""

    __tablename__ = "notify_destinations"
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    key: Mapped[str] = mapped_column(String(64), unique=True)  # sha256 of the URL, hex
    label: Mapped[str] = mapped_column(String(512))  # the URL's scheme, host and port: safe to show
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    sent: Mapped[int] = mapped_column(BigInteger, server_default="0")  # messages the receiver accepted
    failed: Mapped[int] = mapped_column(BigInteger, server_default="0")  # tries that failed (each retry counts)
    dropped: Mapped[int] = mapped_column(BigInteger, server_default="0")  # messages given up or pushed out
    last_sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
    last_error_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))


class NotifySeen(Base):
    """What one destination was told of one attempt: the diagnosis last looked at (its revision and time) and
    what was announced of it (NULL verdict: nothing yet, it was healthy or filtered out)."""

    __tablename__ = "notify_seen"
    __table_args__ = (UniqueConstraint("destination_id", "job", "attempt", name="uq_notify_seen_destination_id"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    destination_id: Mapped[int] = mapped_column(ForeignKey("notify_destinations.id", ondelete="CASCADE"))
    job: Mapped[str] = mapped_column(String(512))
    attempt: Mapped[int] = mapped_column(BigInteger)
    revision: Mapped[int] = mapped_column(BigInteger)  # the attempt revision of the diagnosis looked at
    diagnosed_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))  # and when it was made
    verdict: Mapped[str | None] = mapped_column(String(16))  # announced; NULL: nothing announced
    culprit: Mapped[str | None] = mapped_column(Text)  # the root cause announced, in words
    partial: Mapped[bool | None] = mapped_column(Boolean)  # announced before every rank dumped (0019)
    sent_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))  # a message of it taken (0019)


class NotifyMessage(Base):
    """A message waiting to be delivered (the outbox): removed in the transaction that records it sent."""

    __tablename__ = "notify_outbox"
    __table_args__ = (Index("ix_notify_outbox_destination_id_next_try_at", "destination_id", "next_try_at"),)
    id: Mapped[int] = mapped_column(Integer, primary_key=True)
    destination_id: Mapped[int] = mapped_column(ForeignKey("notify_destinations.id", ondelete="CASCADE"))
    delivery: Mapped[str] = mapped_column(String(64), unique=True)  # X-Frlake-Delivery: receivers dedup by it
    job: Mapped[str] = mapped_column(String(512))
    attempt: Mapped[int] = mapped_column(BigInteger)
    body: Mapped[str] = mapped_column(Text)  # the JSON posted, as it will be signed
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    tries: Mapped[int] = mapped_column(Integer, server_default="0")
    next_try_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    last_error: Mapped[str | None] = mapped_column(Text)
