"""A job's attempts over time and a host's incidents per week: what the job
and host pages show, over the stored diagnoses (never the entries)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb

    from frlake.catalog.attempts import AttemptRow
    from frlake.catalog.store import Catalog


_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)


def iso_ns(ns: int | None) -> str | None:
    """Nanoseconds since the epoch as ISO 8601 with its offset (UTC)."""
    if ns is None:
        return None
    return (_EPOCH + timedelta(microseconds=ns // 1000)).isoformat(timespec="microseconds")


def attempt_dict(a: AttemptRow) -> dict:
    """An attempt as the jobs list and the API give it."""
    return {
        "job": a.job, "attempt": a.attempt, "verdict": a.verdict, "summary": a.summary, "n_dumps": a.n_dumps,
        "hosts": list(a.hosts), "started_ns": a.started_ns, "started_at": iso_ns(a.started_ns),
        "last_seen_at": a.last_seen_at,
        "root": None if a.root_rank is None else {"rank": a.root_rank, "host": a.root_host, "reason": a.root_reason},
    }


def _culprits(con: duckdb.DuckDBPyConnection, column: str, value) -> list[tuple]:
    return con.execute(
        f"""SELECT job, attempt, position, rank, host, reason, role, pg_desc, seq, op, started_ns FROM culprits
            WHERE {column} = ? ORDER BY started_ns DESC NULLS LAST, job, attempt, position""",
        [value],
    ).fetchall()


def job_history(con: duckdb.DuckDBPyConnection, catalog: Catalog, job: str) -> dict:
    """A job's attempts, oldest first, each with its verdict and root cause,
    and the hosts and ranks that came back: named (root cause or involved) in
    more than one attempt."""
    _, rows = catalog.attempts.page(job=job, limit=100_000)
    ended = {a.attempt: a.ended_ns for a in catalog.attempts.info(job)}
    attempts = []
    for a in sorted(rows, key=lambda r: r.attempt):
        d = attempt_dict(a)
        d["ended_ns"], d["ended_at"] = ended.get(a.attempt), iso_ns(ended.get(a.attempt))
        attempts.append(d)
    named: dict[tuple[str, object], dict[int, dict]] = {}
    for _, attempt, position, rank, host, reason, role, *_ in _culprits(con, "job", job):
        for kind, value in (("host", host), ("rank", rank)):
            if value is None:
                continue
            seen = named.setdefault((kind, value), {})
            if attempt not in seen or position == 0:
                seen[attempt] = {"attempt": attempt, "role": role, "reason": reason, "root_cause": position == 0}
    recurring = [
        {"kind": kind, "value": value, "attempts": sorted(seen.values(), key=lambda x: x["attempt"]),
         "as_root_cause": sum(1 for x in seen.values() if x["root_cause"])}
        for (kind, value), seen in named.items() if len(seen) > 1
    ]
    recurring.sort(key=lambda r: (-r["as_root_cause"], -len(r["attempts"]), r["kind"], str(r["value"])))
    return {"job": job, "attempts": attempts, "recurring": recurring}


def week_of(ns: int) -> str:
    """The Monday (UTC) of the week of a time, as YYYY-MM-DD."""
    day = datetime.fromtimestamp(ns / 1e9, tz=UTC).date()
    return (day - timedelta(days=day.weekday())).isoformat()


def host_history(con: duckdb.DuckDBPyConnection, catalog: Catalog, host: str, limit: int = 500) -> dict | None:
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
    keys = ("job", "attempt", "position", "rank", "host", "reason", "role", "pg_desc", "seq", "op", "started_ns")
    culprit_of = [dict(zip(keys, r)) | {"started_at": iso_ns(r[10])} for r in named]
    weeks: dict[str, dict] = {}
    for a in attempts:
        if a.started_ns is not None:
            weeks.setdefault(week_of(a.started_ns), {"attempts": 0, "root_cause": 0, "involved": 0})["attempts"] += 1
    for c in culprit_of:
        if c["started_ns"] is not None:
            w = weeks.setdefault(week_of(c["started_ns"]), {"attempts": 0, "root_cause": 0, "involved": 0})
            w["root_cause" if c["position"] == 0 else "involved"] += 1
    health_cols = ("job", "attempt", "rank", "check_name", "status", "healthy", "output", "snapshot_ns")
    health = con.execute(  # nvidia-resiliency-ext's GPU and NIC checks of this host's ranks
        f"SELECT {', '.join(health_cols)} FROM health WHERE host = ? "
        "ORDER BY snapshot_ns DESC NULLS LAST, job, attempt, rank, check_name LIMIT 200", [host]).fetchall()
    return {
        "host": host, "summary": dict(zip(cols, summary)) if summary else {"host": host},
        "attempts_total": total, "attempts": [attempt_dict(a) for a in attempts], "culprit_of": culprit_of,
        "weeks": [{"week": w} | v for w, v in sorted(weeks.items())],
        "health": [dict(zip(health_cols, r)) | {"snapshot_at": iso_ns(r[7])} for r in health],
    }

