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

from frlake.diagnose.evidence import Evidence

MIN_LATENESS_NS = 10_000_000  # 10 ms: below this, lateness is noise on any fleet
NOISE_FACTOR = 10  # and 10x the typical lateness of the attempt


@dataclass
class RankLateness:
    rank: int
    collectives: int
    arrived_last: int
    late_p50_ms: float
    late_p90_ms: float
    late_max_ms: float
    root_late_events: int = 0
    root_late_ms: float | None = None


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


TOP_RANKS = 16  # per attempt, the latest ranks are kept even without unexplained late arrivals

_LATENESS = """
    CREATE OR REPLACE TEMP TABLE _late AS
    SELECT c.rank, c.t, c.t - m.t0 AS late, c.t = m.t1 AND m.t1 > m.t0 AS last,
           c.pg_name, c.pg_desc, c.seq, c.op, c.stack_id
    FROM {calls} c JOIN {instances} m USING (pg_name, seq)
"""


def analyze(con: duckdb.DuckDBPyConnection, ev: Evidence,
            min_events: int = 3) -> tuple[Straggler | None, list[RankLateness]]:
    """The straggler (or None) and the lateness of the notable ranks."""
    con.execute(_LATENESS.format(calls=ev.rel.calls, instances=ev.rel.instances))
    stats = {
        r[0]: RankLateness(*r)
        for r in con.execute(
            """
            SELECT rank, count(*), count(*) FILTER (WHERE last),
                   quantile_cont(late, 0.5) / 1e6, quantile_cont(late, 0.9) / 1e6, max(late) / 1e6
            FROM _late GROUP BY rank
            """
        ).fetchall()
    }
    if not stats:
        return None, []
    typical = statistics.median(s.late_p50_ms for s in stats.values()) * 1e6
    threshold = max(MIN_LATENESS_NS, NOISE_FACTOR * typical)
    events = con.execute(
        "SELECT t, late, rank, pg_name, pg_desc, seq, op, stack_id FROM _late WHERE late > $threshold ORDER BY t",
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
    for rank, rows in roots.items():
        stats[rank].root_late_events = len(rows)
        stats[rank].root_late_ms = round(statistics.median(r[1] for r in rows) / 1e6, 3)
    latest = sorted(stats.values(), key=lambda s: -s.late_p50_ms)[:TOP_RANKS]
    notable = sorted({s.rank: s for s in latest + [stats[r] for r in roots]}.values(), key=lambda s: s.rank)
    if not roots:
        return None, notable
    rank, rows = max(roots.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    if len(rows) < min_events or len(rows) < 0.5 * total:
        return None, notable
    first = rows[0]
    straggler = Straggler(rank, stats[rank].root_late_ms, len(rows), total, first[3], first[4], first[5], first[6], first[7])
    return straggler, notable
