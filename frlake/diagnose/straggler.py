"""Ranks that arrive late to collectives, and why.

For every collective instance with at least two members present, a member's
lateness is its time_created minus the first member's. A late arrival is
*explained* when another late arrival happened while it was waiting (between
the first member's arrival and its own): it was probably held up, in a
collective or in a point-to-point op the recorder did not keep. The
straggler is the rank whose late arrivals are the unexplained ones, again and
again; arriving last most often is not the same as being the cause.
"""

from __future__ import annotations

import bisect
import statistics
from dataclasses import dataclass

import duckdb

MIN_LATENESS_NS = 10_000_000  # 10 ms: below this, lateness is noise on any fleet
NOISE_FACTOR = 10  # and 10x the typical lateness of the attempt


@dataclass
class Straggler:
    rank: int
    lateness_ms: float
    root_events: int
    total_root_events: int
    pg: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    stack_id: int | None


def find(con: duckdb.DuckDBPyConnection, min_events: int = 3) -> Straggler | None:
    typical = con.execute(
        """
        WITH m AS (SELECT pg_name, seq, min(t) AS t0, count(*) AS n FROM _e WHERE NOT is_p2p GROUP BY ALL HAVING n > 1)
        SELECT median(e.t - m.t0) FROM _e e JOIN m USING (pg_name, seq) WHERE NOT e.is_p2p
        """
    ).fetchone()[0]
    if typical is None:
        return None
    threshold = max(MIN_LATENESS_NS, NOISE_FACTOR * float(typical))
    events = con.execute(
        """
        WITH m AS (SELECT pg_name, seq, min(t) AS t0, count(*) AS n FROM _e WHERE NOT is_p2p GROUP BY ALL HAVING n > 1)
        SELECT e.t, e.t - m.t0 AS late, e.rank, e.pg_name, e.pg_desc, e.seq, e.op, e.stack_id
        FROM _e e JOIN m USING (pg_name, seq)
        WHERE NOT e.is_p2p AND e.t - m.t0 > $threshold
        ORDER BY e.t
        """,
        {"threshold": threshold},
    ).fetchall()
    times = [row[0] for row in events]
    roots: dict[int, list[tuple]] = {}
    total = 0
    for row in events:
        t, late = row[0], row[1]
        # any other late arrival while this one was on its way?
        lo = bisect.bisect_left(times, t - late)
        hi = bisect.bisect_left(times, t)
        if hi > lo:
            continue
        roots.setdefault(row[2], []).append(row)
        total += 1
    if not roots:
        return None
    rank, rows = max(roots.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    if len(rows) < min_events or len(rows) < 0.5 * total:
        return None
    lateness = statistics.median(r[1] for r in rows) / 1e6
    first = rows[0]
    return Straggler(rank, round(lateness, 3), len(rows), total, first[3], first[4], first[5], first[6], first[7])
