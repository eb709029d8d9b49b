"""One attempt seen closely: who arrived late or never arrived, and the
attempt as a Chrome/Perfetto trace."""

from __future__ import annotations

import json
from collections.abc import Iterator

import duckdb


def groups_of(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> list[dict]:
    """The attempt's process groups (name, description, members), from the
    ranks' ``pg_config``; from the collectives they recorded when no dump has
    one (gloo)."""
    params = {"job": job, "attempt": attempt}
    rows = con.execute(
        """SELECT pg_name, any_value(pg_desc), list_distinct(flatten(list(ranks))), list(DISTINCT rank) FROM groups
           WHERE job = $job AND attempt = $attempt GROUP BY pg_name""", params).fetchall()
    if not rows:
        rows = con.execute(
            """SELECT pg_name, any_value(pg_desc), list(DISTINCT rank), list(DISTINCT rank) FROM entries
               WHERE job = $job AND attempt = $attempt AND NOT is_p2p GROUP BY pg_name""", params).fetchall()
    # recorded_by: the ranks whose dump names the group (so they did dump)
    out = [{"pg": pg, "pg_desc": desc, "members": sorted(members or []), "recorded_by": set(by or [])}
           for pg, desc, members, by in rows]
    return sorted(out, key=lambda g: (-len(g["members"]), g["pg_desc"] or "", _natural(g["pg"])))


def _natural(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


class UnknownGroup(LookupError):
    """The attempt has no process group by that name."""


def arrivals(con: duckdb.DuckDBPyConnection, job: str, attempt: int, pg: str | None = None,
             last: int = 40, max_ranks: int = 256) -> dict:
    """Lateness (ms after the first member) of each member rank at the last
    ``last`` collectives of one process group, who never arrived (``missing``:
    ranks whose dump lacks the collective) and which members left no dump
    (``no_dump``: their arrival is unknown); with the attempt's groups
    (``groups``) to choose another.

    Without ``pg``: the group of the root culprit if there is one, else the
    group with most members. A ``pg`` the attempt does not have is an
    ``UnknownGroup``."""
    params = {"job": job, "attempt": attempt}
    groups = groups_of(con, job, attempt)
    if pg is not None and pg not in {g["pg"] for g in groups}:
        raise UnknownGroup(f"attempt {attempt} of job {job!r} has no process group {pg!r}; it has "
                           + (", ".join(f"{g['pg']} ({g['pg_desc']})" for g in groups) or "none"))
    if pg is None:
        row = con.execute(
            "SELECT pg FROM culprits WHERE job = $job AND attempt = $attempt AND position = 0 AND pg IS NOT NULL",
            params,
        ).fetchone()
        pg = row[0] if row and row[0] in {g["pg"] for g in groups} else (groups[0]["pg"] if groups else None)
    choices = [{"pg": g["pg"], "pg_desc": g["pg_desc"], "size": len(g["members"])} for g in groups]
    empty = {"pg": pg, "pg_desc": None, "seqs": [], "ranks": [], "late_ms": [], "missing": [], "no_dump": [],
             "groups": choices}
    if pg is None:
        return empty
    group = next(g for g in groups if g["pg"] == pg)
    params |= {"pg": pg, "last": last}
    rows = con.execute(
        """
        WITH e AS (
          SELECT rank, pg_desc, collective_seq_id AS seq, time_created_ns AS t FROM entries
          WHERE job = $job AND attempt = $attempt AND pg_name = $pg AND NOT is_p2p
        ), seqs AS (SELECT DISTINCT seq FROM e ORDER BY seq DESC LIMIT $last),
        first AS (SELECT seq, min(t) AS t0 FROM e GROUP BY seq)
        SELECT e.rank, e.seq, any_value(e.pg_desc), round((min(e.t) - any_value(first.t0)) / 1e6, 3)
        FROM e JOIN seqs USING (seq) JOIN first USING (seq) GROUP BY e.rank, e.seq
        """,
        params,
    ).fetchall()
    seqs = sorted({r[1] for r in rows})
    ranks = (group["members"] or sorted({r[0] for r in rows}))[:max_ranks]  # only the group's members
    dumped = set().union(*(g["recorded_by"] for g in groups), (r[0] for r in rows))
    no_dump = [rank for rank in ranks if rank not in dumped]  # unknown, not "never arrived": nothing says
    grid = {(r[0], r[1]): r[3] for r in rows}
    late = [[grid.get((rank, seq)) for seq in seqs] for rank in ranks]
    missing = [[rank, seq] for rank in ranks if rank in dumped for seq in seqs if (rank, seq) not in grid]
    return empty | {"pg_desc": group["pg_desc"], "seqs": seqs, "ranks": ranks, "late_ms": late, "missing": missing,
                    "no_dump": no_dump}


def perfetto_trace(con: duckdb.DuckDBPyConnection, job: str, attempt: int, batch: int = 50_000) -> Iterator[str]:
    """The attempt as Chrome trace JSON (opens in Perfetto or chrome://tracing):
    one process per rank, one track per process group, an ``X`` event per
    entry. Streamed in pieces, so a 1,000-rank attempt never sits in memory."""
    params = {"job": job, "attempt": attempt}
    yield '{"displayTimeUnit": "ms", "traceEvents": [\n'
    first = True
    meta = con.execute(
        """SELECT rank, any_value(host), list(DISTINCT coalesce(pg_desc, '') || ':' || pg_name ORDER BY 1)
           FROM entries WHERE job = $job AND attempt = $attempt GROUP BY rank ORDER BY rank""",
        params,
    ).fetchall()
    tracks: dict[tuple[int, str], int] = {}
    for rank, host, groups in meta:
        events = [{"ph": "M", "name": "process_name", "pid": rank, "args": {"name": f"rank {rank} ({host})"}},
                  {"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}]
        for tid, label in enumerate(groups, 1):
            tracks[(rank, label.split(":", 1)[1])] = tid
            events.append({"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": f"pg {label}"}})
        for ev in events:
            yield ("" if first else ",\n") + json.dumps(ev)
            first = False
    cur = con.execute(
        """
        SELECT rank, pg_name, profiling_name, collective_seq_id, p2p_seq_id, state, time_created_ns,
               coalesce(duration_ms * 1000,
                        (time_discovered_completed_ns - time_created_ns) / 1000,
                        (lead(time_created_ns) OVER (PARTITION BY rank ORDER BY entry_index) - time_created_ns) / 1000,
                        1) AS dur_us,
               input_sizes::VARCHAR, input_dtypes::VARCHAR, record_id
        FROM entries WHERE job = $job AND attempt = $attempt ORDER BY rank, entry_index
        """,
        params,
    )
    while True:
        rows = cur.fetchmany(batch)
        if not rows:
            break
        parts = []
        for rank, pg, name, seq, p2p_seq, state, t, dur, sizes, dtypes, record in rows:
            parts.append(json.dumps({
                "ph": "X", "name": name, "cat": state or "", "pid": rank, "tid": tracks.get((rank, pg), 0),
                "ts": t / 1000 if t is not None else 0, "dur": max(float(dur or 1), 1.0),
                "args": {"pg": pg, "seq": seq, "p2p_seq": p2p_seq, "state": state, "sizes": sizes, "dtypes": dtypes,
                         "record_id": record},
            }))
        yield ("" if first else ",\n") + ",\n".join(parts)
        first = False
    yield "\n]}\n"


def progress(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> list[dict]:
    """Per process group and rank: the last collective sequence id enqueued,
    started and completed (from the entries, and from pg_status where the
    dump has it), so a stalled group shows who is behind."""
    rows = con.execute(
        """
        WITH e AS (
          SELECT pg_name, any_value(pg_desc) AS pg_desc, rank, any_value(host) AS host, any_value(pg_id) AS pg_id,
                 max(collective_seq_id) AS last_enqueued,
                 max(collective_seq_id) FILTER (WHERE state IN ('started', 'completed')) AS last_started,
                 max(collective_seq_id) FILTER (WHERE state = 'completed') AS last_completed
          FROM entries WHERE job = $job AND attempt = $attempt AND NOT is_p2p GROUP BY pg_name, rank
        )
        SELECT e.pg_name, e.pg_desc, e.rank, e.host,
               greatest(e.last_enqueued, s.last_enqueued_collective) AS last_enqueued,
               CASE WHEN s.last_started_collective >= 0 THEN s.last_started_collective ELSE e.last_started END,
               coalesce(s.last_completed_collective, e.last_completed) AS last_completed
        FROM e LEFT JOIN pg_status s
          ON s.job = $job AND s.attempt = $attempt AND s.rank = e.rank AND s.pg_id = e.pg_id::VARCHAR
        ORDER BY e.pg_desc, e.pg_name, e.rank
        """,
        {"job": job, "attempt": attempt},
    ).fetchall()
    groups: dict[str, dict] = {}
    for pg, desc, rank, host, enq, started, completed in rows:
        g = groups.setdefault(pg, {"pg": pg, "pg_desc": desc, "ranks": []})
        g["ranks"].append({"rank": rank, "host": host, "last_enqueued": enq, "last_started": started,
                           "last_completed": completed})
    return list(groups.values())
