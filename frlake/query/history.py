"""A job's attempts over time and a host's incidents per week: what the job
and host pages show, over the stored diagnoses (never the entries)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

from frlake.values import Record

if TYPE_CHECKING:
    import duckdb

    from frlake.catalog.rows import AttemptRow
    from frlake.catalog.store import Catalog


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ns(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as ISO 8601 with its offset (UTC)."""
    if ns is None:
        return None
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat(timespec="microseconds")


@dataclass(frozen=True)
class Root(Record):
    """The root cause an attempt's diagnosis names."""

    rank: int | None
    host: str | None
    reason: str | None


@dataclass(frozen=True)
class AttemptSummary(Record):
    """An attempt as the jobs list, the job and host pages and the API give it."""

    job: str
    attempt: int
    verdict: str | None
    summary: str | None
    n_dumps: int
    hosts: tuple[str, ...]
    started_ns: int | None
    started_at: str | None
    last_seen_at: datetime
    root: Root | None

    @classmethod
    def of(cls, a: AttemptRow) -> AttemptSummary:
        return cls(a.job, a.attempt, a.verdict, a.summary, a.n_dumps, tuple(a.hosts), a.started_ns,
                   iso_ns(a.started_ns), a.last_seen_at,
                   None if a.root_rank is None else Root(a.root_rank, a.root_host, a.root_reason))


@dataclass(frozen=True)
class Facets(Record):
    """How many of the attempts a filter matches have each verdict, host and root-cause reason, most first
    (datasette's facets): (value, count) pairs."""

    verdict: tuple[tuple[str, int], ...]
    host: tuple[tuple[str, int], ...]
    reason: tuple[tuple[str, int], ...]

    def items(self):
        """(name, counts) of each facet, in the order a page lists them."""
        return [(name, getattr(self, name)) for name in ("verdict", "host", "reason")]

    def to_dict(self) -> dict:
        return {name: [{"value": v, "count": n} for v, n in counts] for name, counts in self.items()}


@dataclass(frozen=True)
class JobAttempt(AttemptSummary):
    """An attempt on its job's page: also when its last entry was recorded."""

    ended_ns: int | None = None
    ended_at: str | None = None


@dataclass(frozen=True)
class Appearance(Record):
    """One attempt in which a host or rank was named."""

    attempt: int
    role: str | None
    reason: str | None
    root_cause: bool


@dataclass(frozen=True)
class Recurrence(Record):
    """A host or rank named in more than one attempt of a job."""

    kind: str  # host | rank
    value: str | int
    attempts: tuple[Appearance, ...]
    as_root_cause: int


@dataclass(frozen=True)
class JobHistory(Record):
    job: str
    attempts: tuple[JobAttempt, ...]
    recurring: tuple[Recurrence, ...]


@dataclass(frozen=True)
class Mention(Record):
    """A diagnosis that names a host: as root cause (position 0) or involved."""

    job: str
    attempt: int
    position: int
    rank: int | None
    host: str | None
    reason: str | None
    role: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    started_ns: int | None
    started_at: str | None


@dataclass(frozen=True)
class Week(Record):
    week: str  # its Monday, YYYY-MM-DD
    attempts: int
    root_cause: int
    involved: int


@dataclass(frozen=True)
class HealthCheck(Record):
    """One of nvidia-resiliency-ext's GPU or NIC checks of a rank of the host."""

    job: str
    attempt: int
    rank: int | None
    check_name: str | None
    status: str | None
    healthy: bool | None
    output: str | None
    snapshot_ns: int | None
    snapshot_at: str | None


@dataclass(frozen=True)
class HostHistory(Record):
    host: str
    summary: dict  # the host's row of the ``hosts`` view, by column
    attempts_total: int
    attempts: tuple[AttemptSummary, ...]
    culprit_of: tuple[Mention, ...]
    weeks: tuple[Week, ...]
    health: tuple[HealthCheck, ...]


def _culprits(con: duckdb.DuckDBPyConnection, column: str, value) -> list[tuple]:
    return con.execute(
        f"""SELECT job, attempt, position, rank, host, reason, role, pg_desc, seq, op, started_ns FROM culprits
            WHERE {column} = ? ORDER BY started_ns DESC NULLS LAST, job, attempt, position""",
        [value],
    ).fetchall()


def job_history(con: duckdb.DuckDBPyConnection, catalog: Catalog, job: str) -> JobHistory:
    """A job's attempts, oldest first, each with its verdict and root cause,
    and the hosts and ranks that came back: named (root cause or involved) in
    more than one attempt."""
    _, rows = catalog.attempts.page(job=job, limit=100_000)
    ended = {a.attempt: a.ended_ns for a in catalog.attempts.info(job)}
    attempts = tuple(
        JobAttempt(**vars(AttemptSummary.of(a)), ended_ns=ended.get(a.attempt), ended_at=iso_ns(ended.get(a.attempt)))
        for a in sorted(rows, key=lambda r: r.attempt))
    named: dict[tuple[str, object], dict[int, Appearance]] = {}
    for _, attempt, position, rank, host, reason, role, *_ in _culprits(con, "job", job):
        for kind, value in (("host", host), ("rank", rank)):
            if value is None:
                continue
            seen = named.setdefault((kind, value), {})
            if attempt not in seen or position == 0:
                seen[attempt] = Appearance(attempt, role, reason, position == 0)
    recurring = [
        Recurrence(kind, value, tuple(sorted(seen.values(), key=lambda x: x.attempt)),
                   sum(1 for x in seen.values() if x.root_cause))
        for (kind, value), seen in named.items() if len(seen) > 1
    ]
    recurring.sort(key=lambda r: (-r.as_root_cause, -len(r.attempts), r.kind, str(r.value)))
    return JobHistory(job, attempts, tuple(recurring))


def week_of(ns: int) -> str:
    """The Monday (UTC) of the week of a time, as YYYY-MM-DD."""
    day = datetime.fromtimestamp(ns / 1e9, tz=UTC).date()
    return (day - timedelta(days=day.weekday())).isoformat()


def host_history(con: duckdb.DuckDBPyConnection, catalog: Catalog, host: str,
                 limit: int = 500) -> HostHistory | None:
    """A host's summary, its attempts (newest first), the diagnoses that name
    it (as root cause or involved) and a timeline per week; None if the lake
    has never seen it."""
    cur = con.execute("SELECT * FROM hosts WHERE host = ?", [host])
    summary = cur.fetchone()
    cols = [d[0] for d in cur.description]
    named = _culprits(con, "host", host)
    if summary is None and not named:
        return None
    total, attempts = catalog.attempts.page(exact_host=host, limit=limit)
    culprit_of = tuple(Mention(*r, started_at=iso_ns(r[10])) for r in named)
    weeks: dict[str, dict[str, int]] = {}
    for a in attempts:
        if a.started_ns is not None:
            weeks.setdefault(week_of(a.started_ns), {"attempts": 0, "root_cause": 0, "involved": 0})["attempts"] += 1
    for c in culprit_of:
        if c.started_ns is not None:
            w = weeks.setdefault(week_of(c.started_ns), {"attempts": 0, "root_cause": 0, "involved": 0})
            w["root_cause" if c.position == 0 else "involved"] += 1
    health_cols = ("job", "attempt", "rank", "check_name", "status", "healthy", "output", "snapshot_ns")
    health = con.execute(  # nvidia-resiliency-ext's GPU and NIC checks of this host's ranks
        f"SELECT {', '.join(health_cols)} FROM health WHERE host = ? "
        "ORDER BY snapshot_ns DESC NULLS LAST, job, attempt, rank, check_name LIMIT 200", [host]).fetchall()
    return HostHistory(
        host, dict(zip(cols, summary)) if summary else {"host": host}, total,
        tuple(AttemptSummary.of(a) for a in attempts), culprit_of,
        tuple(Week(w, **v) for w, v in sorted(weeks.items())),
        tuple(HealthCheck(*r, snapshot_at=iso_ns(r[7])) for r in health))

