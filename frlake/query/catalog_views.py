"""The SQL views over the catalog's tables (docs/schema.md, "Catalog views"):
one SELECT each, built on the SQLAlchemy models, and read into Arrow with
types derived from the models' columns, so a new column has the right type
in every view without a second list to keep."""

from __future__ import annotations

import threading
from collections.abc import Callable

import pyarrow as pa
from sqlalchemy import BigInteger, Boolean, DateTime, Float, Integer, Select, String, Text, func, select
from sqlalchemy.types import TypeEngine

from frlake.catalog.models import (
    Attempt,
    CulpritRow,
    Dump,
    IncidentRow,
    IngestRun,
    Job,
    LauncherFailure,
    RankStat,
    SourceFile,
)
from frlake.catalog.store import Catalog

_ARROW = (  # the most specific SQLAlchemy type first (BigInteger is an Integer)
    (BigInteger, pa.int64()),
    (Integer, pa.int32()),
    (Float, pa.float64()),
    (Boolean, pa.bool_()),
    (DateTime, pa.timestamp("us", tz="UTC")),
    (Text, pa.string()),
    (String, pa.string()),
)


def arrow_type(sql_type: TypeEngine) -> pa.DataType:
    """The Arrow type of a column of a SQLAlchemy type (a count is an int64)."""
    for kind, arrow in _ARROW:
        if isinstance(sql_type, kind):
            return arrow
    raise TypeError(f"no Arrow type for the SQL type {sql_type!r}: add it to frlake.query.catalog_views._ARROW")


def _count(column, where) -> object:
    return select(func.count(column)).where(where).scalar_subquery().cast(BigInteger)


def _jobs() -> Select:
    return select(Job.name.label("job"), Job.first_seen_at, Job.last_seen_at,
                  _count(Attempt.id, Attempt.job_id == Job.id).label("n_attempts"))


def _attempts() -> Select:
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), Attempt.first_seen_at, Attempt.last_seen_at,
        Attempt.started_ns, Attempt.ended_ns, _count(Dump.id, Dump.attempt_id == Attempt.id).label("n_dumps"),
    ).join(Job, Job.id == Attempt.job_id)


def _files() -> Select:
    return select(
        SourceFile.path, SourceFile.size, SourceFile.mtime_ns, SourceFile.sha256, SourceFile.status,
        SourceFile.reason, SourceFile.detail, SourceFile.job, SourceFile.attempt, SourceFile.host,
        SourceFile.rank, SourceFile.run_id, SourceFile.seen_at,
    ).where(SourceFile.is_current.is_(True))


def _ingest_runs() -> Select:
    return select(
        IngestRun.id.label("run_id"), IngestRun.kind, IngestRun.started_at, IngestRun.finished_at, IngestRun.status,
        IngestRun.sources, IngestRun.n_ingested, IngestRun.n_duplicate, IngestRun.n_rejected, IngestRun.n_unchanged,
    )


def _incidents() -> Select:
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), IncidentRow.verdict, IncidentRow.kind,
        IncidentRow.summary, IncidentRow.world_size, IncidentRow.n_dumps, Attempt.started_ns, Attempt.ended_ns,
        IncidentRow.algorithm_version, IncidentRow.diagnosed_at,
    ).join(Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)


def _culprits() -> Select:
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), IncidentRow.verdict, CulpritRow.position,
        CulpritRow.rank, CulpritRow.host, CulpritRow.reason, CulpritRow.role, CulpritRow.pg, CulpritRow.pg_desc,
        CulpritRow.seq, CulpritRow.op, CulpritRow.lateness_ms, CulpritRow.stack_signature, CulpritRow.stall_signature,
        CulpritRow.top_frame, CulpritRow.evidence, CulpritRow.host_inferred, CulpritRow.host_placement,
        CulpritRow.wait_ms,
        CulpritRow.wait_per_step_ms, CulpritRow.step_without_ms, Attempt.started_ns,
    ).join(IncidentRow, IncidentRow.id == CulpritRow.incident_id).join(
        Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)


def _rank_stats() -> Select:
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), RankStat.rank, RankStat.host,
        RankStat.collectives, RankStat.arrived_last, RankStat.late_p50_ms, RankStat.late_p90_ms,
        RankStat.late_max_ms, RankStat.root_late_events, RankStat.root_late_ms, Attempt.started_ns,
    ).join(IncidentRow, IncidentRow.id == RankStat.incident_id).join(
        Attempt, Attempt.id == IncidentRow.attempt_id).join(Job, Job.id == Attempt.job_id)


def _attempt_hosts() -> Select:
    """One row per host of an attempt (the hosts of its dumps): what the fleet reports need of the dumps,
    read from the catalog in one query (the lake's ``dumps`` is a file per attempt). Dumps of unknown host
    are in no row: no report counts "no host" as a host."""
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), Dump.host,
        func.count(func.distinct(Dump.rank)).cast(BigInteger).label("ranks"),
        func.min(Dump.rank).label("first_rank"), Attempt.started_ns,
    ).join(Attempt, Attempt.id == Dump.attempt_id).join(Job, Job.id == Attempt.job_id).where(
        Dump.host.is_not(None)).group_by(
        Job.name, Attempt.number, Dump.host, Attempt.started_ns)


def _launcher_failures() -> Select:
    """The workers the launcher saw fail (a torchrun failure summary's entries, read beside the dumps)."""
    return select(
        Job.name.label("job"), Attempt.number.label("attempt"), LauncherFailure.rank, LauncherFailure.local_rank,
        LauncherFailure.host, LauncherFailure.exitcode, LauncherFailure.failed_at, LauncherFailure.error_file,
        LauncherFailure.message, LauncherFailure.root_cause, LauncherFailure.path, Attempt.started_ns,
    ).join(Attempt, Attempt.id == LauncherFailure.attempt_id).join(Job, Job.id == Attempt.job_id)


CATALOG_VIEWS: dict[str, Callable[[], Select]] = {
    "jobs": _jobs, "attempts": _attempts, "files": _files, "ingest_runs": _ingest_runs,
    "incidents": _incidents, "culprits": _culprits, "rank_stats": _rank_stats, "attempt_hosts": _attempt_hosts,
    "launcher_failures": _launcher_failures,
}


def schema_of(query: Select) -> pa.Schema:
    return pa.schema([(c.name, arrow_type(c.type)) for c in query.selected_columns])


def catalog_table(catalog: Catalog, name: str) -> pa.Table:
    """One catalog view's rows as an Arrow table."""
    query = CATALOG_VIEWS[name]()
    target = schema_of(query)
    rows = catalog.rows(query)
    columns = [pa.array([r[i] for r in rows], f.type) for i, f in enumerate(target)]
    return pa.Table.from_arrays(columns, schema=target)


class LazyCatalogTable:
    """One catalog view's rows, read from the catalog the first time a query reads them, then kept.

    Registered in DuckDB in place of the Arrow table: DuckDB binds a view with the columns
    (``__arrow_c_schema__``) and asks for the rows (``__arrow_c_stream__``) only when it scans them, so a
    connection costs what its queries read, not every catalog view (50,000 files at 100M entries) whether
    read or not. The rows are those of the first read: every later read of the connection sees the same."""

    def __init__(self, catalog: Catalog, name: str):
        self.catalog = catalog
        self.name = name
        self.schema = schema_of(CATALOG_VIEWS[name]())
        self._table: pa.Table | None = None
        self._lock = threading.Lock()

    @property
    def column_names(self) -> list[str]:
        return self.schema.names

    @property
    def loaded(self) -> bool:
        return self._table is not None

    def table(self) -> pa.Table:
        with self._lock:  # two cursors of one connection may scan it at once
            if self._table is None:
                self._table = catalog_table(self.catalog, self.name)
            return self._table

    def __arrow_c_schema__(self):
        return self.schema.__arrow_c_schema__()

    def __arrow_c_stream__(self, requested_schema=None):
        return self.table().__arrow_c_stream__(requested_schema)
