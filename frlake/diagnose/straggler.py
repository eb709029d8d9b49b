"""Ranks that arrive late to collectives, and why.

For every collective instance with at least two members present, a member's
lateness is its time_created minus the first member's. A late arrival is
*explained* when another late arrival happened while it was waiting (between
the first member's arrival and its own): it was probably held up, in a
collective or in a point-to-point op the recorder did not keep. The
straggler is the rank with the most unexplained late arrivals; arriving last
most often is not the same as being the cause.

It must also be significant against the attempt's own jitter: on a busy
machine every rank wobbles, and some rank always holds the most unexplained
late arrivals. Two tests, both reported:

* ``p_value``: the chance that jitter alone gives some rank that many (a
  one-sided binomial test, each unexplained late arrival falling on a rank
  with the share of calls that rank made, times the number of ranks since
  the busiest one was picked) must be at most ``MAX_P_VALUE``;
* ``effect_size``: its typical unexplained lateness, in robust standard
  deviations above the other ranks' unexplained late arrivals (how late a
  rank gets by chance on this machine; their lateness overall when they have
  too few), must be at least ``MIN_EFFECT``;
* ``share``: its unexplained lateness, added up, must be at least
  ``MIN_SHARE`` of the time the attempt's collectives span: jitter that
  happens to fall on one rank a few times costs a job little.

``step_ms`` (the median gap between consecutive calls of one collective from
one site) puts the lateness against the attempt's step.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass

import duckdb

from frlake.diagnose import clocks
from frlake.diagnose.evidence import Evidence

MIN_LATENESS_NS = 10_000_000  # 10 ms: below this, lateness is noise on any fleet
NOISE_FACTOR = 3  # and 3x the typical lateness of the attempt
MAX_P_VALUE = 0.05  # the chance that jitter alone gives some rank this many unexplained late arrivals
MIN_EFFECT = 3.0  # its lateness in robust standard deviations of the other ranks' lateness
MIN_JITTER_NS = 100_000  # 0.1 ms: timestamps are not finer than that in practice
# and it must matter: its unexplained lateness, added up, is at least this share of the time its collectives
# span (a busy machine makes some rank 12 ms late on a 32 ms step three times in twenty steps; a rank that
# sleeps before each collective costs the job most of its time)
MIN_SHARE = 0.10
MIN_OTHERS = 8  # the others' unexplained late arrivals are the yardstick from this many on
CORRECT_CLOCKS = True  # lateness on clocks corrected for their hosts' offsets (bench_false_positives weighs both)


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
    p_value: float = 1.0
    effect_size: float = 0.0
    step_ms: float | None = None
    share: float = 0.0  # its unexplained lateness, added up, over the time the attempt's collectives span
    cost: dict | None = None  # what it cost the others (cost())


TOP_RANKS = 16  # per attempt, the latest ranks are kept even without unexplained late arrivals

# Each member's lateness at each collective instance, of one attempt (``k`` and ``ck`` "") or of each ("job,
# attempt, " and "c.job, c.attempt, ").
LATENESS = """
    CREATE OR REPLACE TEMP TABLE {late} AS
    SELECT {ck}c.rank, c.t, c.t - m.t0 AS late, c.t = m.t1 AND m.t1 > m.t0 AS last,
           c.pg_name, c.pg_desc, c.seq, c.op, c.stack_id, c.entry_index, c.t_done, c.sync
    FROM {calls} c JOIN {instances} m USING ({k}pg_name, seq)
"""
# RankLateness of each rank
LATENESS_STATS = """
    SELECT {k}rank, count(*), count(*) FILTER (WHERE last),
           quantile_cont(late, 0.5) / 1e6, quantile_cont(late, 0.9) / 1e6, max(late) / 1e6
    FROM {late} GROUP BY {k}rank ORDER BY {k}rank
"""
# the late arrivals, later than the attempt's threshold ({threshold}: $threshold, or a column joined)
LATE_EVENTS = """
    SELECT {k}t, late, rank, pg_name, pg_desc, seq, op, stack_id FROM {late} WHERE late > {threshold}
    ORDER BY {k}t, rank, pg_name, seq
"""
LATE_SPAN = "SELECT {k}max(t) - min(t) FROM {late}"
_LATE = "_late"  # an attempt's lateness (LATENESS)
# LATENESS of one attempt, each rank's times less its host's clock offset (``_clock``: rank, ns)
LATENESS_CORRECTED = """
    CREATE OR REPLACE TEMP TABLE {late} AS
    WITH c AS (
      SELECT c.rank, c.t - coalesce(o.ns, 0) AS t, c.pg_name, c.pg_desc, c.seq, c.op, c.stack_id, c.entry_index,
             CASE WHEN c.t_done > 0 THEN c.t_done - coalesce(o.ns, 0) ELSE c.t_done END AS t_done, c.sync
      FROM {calls} c SEMI JOIN {instances} m USING (pg_name, seq) LEFT JOIN _clock o USING (rank)
    )
    SELECT rank, t, t - min(t) OVER w AS late, t = max(t) OVER w AND max(t) OVER w > min(t) OVER w AS last,
           pg_name, pg_desc, seq, op, stack_id, entry_index, t_done, sync
    FROM c WINDOW w AS (PARTITION BY pg_name, seq)
"""


@dataclass
class Lateness:
    """What :func:`analyze` reads of an attempt's lateness, read with its batch's (frlake.diagnose.batched):
    ``table`` holds its rows (a view of the batch's)."""

    table: str
    stats: list[tuple]  # LATENESS_STATS
    events: list[tuple]  # LATE_EVENTS at the attempt's threshold()
    span: int | None  # LATE_SPAN


def threshold(stats: dict[int, RankLateness]) -> float:
    """The lateness from which an arrival counts as late: NOISE_FACTOR x the typical lateness, leaving out the
    latest rank (with two ranks a straggler would set it itself), and at least MIN_LATENESS_NS."""
    p50s = sorted(s.late_p50_ms for s in stats.values())
    typical = statistics.median(p50s[:-1] if len(p50s) > 1 else p50s) * 1e6
    return max(MIN_LATENESS_NS, NOISE_FACTOR * typical)


def analyze(con: duckdb.DuckDBPyConnection, ev: Evidence,
            min_events: int = 3) -> tuple[Straggler | None, list[RankLateness], clocks.Clocks | None]:
    """The straggler (or None), the lateness of the notable ranks, and the hosts' clock offsets (None when no
    arrival is MIN_LATENESS_NS late: then no clock makes or hides a straggler)."""
    read: Lateness | None = ev.batch_rows.lateness if ev.batch_rows is not None else None
    if read is None:
        con.execute(LATENESS.format(late=_LATE, k="", ck="", calls=ev.rel.calls, instances=ev.rel.instances))
    table = read.table if read is not None else _LATE
    stats, events = _read_lateness(con, table, read)
    if not stats:
        return None, [], None
    skew = None
    if CORRECT_CLOCKS and any(s.late_max_ms * 1e6 > MIN_LATENESS_NS for s in stats.values()):
        skew = clocks.estimate(con, ev.rel, table)
        shift = skew.by_rank()
        if shift:  # lateness again, on the corrected clocks
            con.execute("CREATE OR REPLACE TEMP TABLE _clock AS SELECT unnest($ranks) AS rank, unnest($ns) AS ns",
                        {"ranks": list(shift), "ns": list(shift.values())})
            con.execute(LATENESS_CORRECTED.format(late=_LATE, calls=ev.rel.calls, instances=ev.rel.instances))
            read, table = None, _LATE
            stats, events = _read_lateness(con, table, None)
    straggler, notable = _judge(con, stats, events, table, read, min_events)
    return straggler, notable, skew


def _read_lateness(con: duckdb.DuckDBPyConnection, table: str,
                   read: Lateness | None) -> tuple[dict[int, RankLateness], list[tuple]]:
    stats = {
        r[0]: RankLateness(*r)
        for r in (read.stats if read is not None else con.execute(LATENESS_STATS.format(k="", late=table)).fetchall())
    }
    if not stats:
        return stats, []
    events = read.events if read is not None else con.execute(
        LATE_EVENTS.format(k="", late=table, threshold="$threshold"), {"threshold": threshold(stats)}).fetchall()
    return stats, events


def _judge(con: duckdb.DuckDBPyConnection, stats: dict[int, RankLateness], events: list[tuple], table: str,
           read: Lateness | None, min_events: int) -> tuple[Straggler | None, list[RankLateness]]:
    """The straggler among the late arrivals ``events`` (or None), and the notable ranks."""
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
    latest = sorted(stats.values(), key=lambda s: (-s.late_p50_ms, s.rank))[:TOP_RANKS]
    notable = sorted({s.rank: s for s in latest + [stats[r] for r in roots]}.values(), key=lambda s: s.rank)
    if not roots:
        return None, notable
    rank, rows = max(roots.items(), key=lambda kv: (len(kv[1]), -kv[0]))
    if len(rows) < min_events:
        return None, notable
    calls = sum(s.collectives for s in stats.values())
    # the rank with the most is picked among all: the chance is for any of them (Bonferroni)
    p_value = min(1.0, len(stats) * binomial_tail(len(rows), total, stats[rank].collectives / calls))
    others = [r[1] for other, late in roots.items() if other != rank for r in late]
    # the yardstick: the other ranks' unexplained late arrivals, where there are enough of them for a spread
    # (four values give a median absolute deviation as large as their largest gap), else all their arrivals
    center, spread = (_robust(others) if len(others) >= max(min_events, MIN_OTHERS)
                      else _others_lateness(con, rank, table, sum(s.collectives for s in stats.values())))
    effect = (statistics.median(r[1] for r in rows) - center) / max(spread, MIN_JITTER_NS)
    span = (read.span if read is not None else con.execute(LATE_SPAN.format(k="", late=table)).fetchone()[0]) or 0
    share = sum(r[1] for r in rows) / span if span > 0 else 0.0
    if p_value > MAX_P_VALUE or effect < MIN_EFFECT or share < MIN_SHARE:
        return None, notable  # one rank holds the most late arrivals, but jitter explains them as well
    first = rows[0]
    step_ms, starts = _steps(con, first[3], table)
    straggler = Straggler(rank, stats[rank].root_late_ms, len(rows), total, first[3], first[4], first[5], first[6],
                          first[7], p_value=float(f"{p_value:.3g}"), effect_size=round(effect, 1), step_ms=step_ms,
                          share=round(share, 3), cost=cost(con, rank, table, threshold(stats), span, starts))
    return straggler, notable


# Each collective the straggler held up: the ones it arrived at last, late ($threshold), with when the latest of
# the others arrived there and their waits for it, added up.
_HELD = """
    SELECT s.t, s.t - (s.late - max(o.late)) AS since, sum(s.late - o.late) AS waited
    FROM {late} s JOIN {late} o ON o.pg_name = s.pg_name AND o.seq = s.seq AND o.rank <> s.rank
    WHERE s.rank = $rank AND s.last AND s.late > $threshold
    GROUP BY s.t, s.late, s.pg_name, s.seq ORDER BY since, s.t
"""


def cost(con: duckdb.DuckDBPyConnection, rank: int, table: str, late_ns: float, span: int,
         step_starts: list[int]) -> dict:
    """What the straggler ``rank`` cost the others over the dumps' window (``span`` ns, the first call to the
    last), from the collectives it held up (those it came to last, later than ``late_ns``): each was held from
    the arrival of the latest of the others to its own.

    - ``wait_ms``: the time those holds cover (their union: a rank that sleeps before each of a step's
      three collectives holds them one after the other, or at once, and the job loses that time once): the
      time the job lost to it where the collectives are on its critical path (a training step's are);
    - ``rank_wait_ms``: each other member's wait for it, added up over the members (idle accelerator time);
    - ``steps``: the calls of its group's busiest call site (``step_starts``, a training loop calls each
      site once a step); ``wait_per_step_ms``: the holds within the steps, over the steps;
    - ``step_without_ms``: the median over the steps of each step less the holds within it: the step the job
      would take without it (an estimate: it assumes nothing else would have held those steps)."""
    rows = con.execute(_HELD.format(late=table), {"rank": rank, "threshold": late_ns}).fetchall()
    merged: list[list[int]] = []
    for t, since, _ in rows:
        if merged and since <= merged[-1][1]:
            merged[-1][1] = max(merged[-1][1], t)
        else:
            merged.append([since, t])
    held = min(sum(b - a for a, b in merged), span)
    out = {"collectives": len(rows), "window_ms": round(span / 1e6, 3), "wait_ms": round(held / 1e6, 3),
           "rank_wait_ms": round(sum(float(w) for *_, w in rows) / 1e6, 3), "steps": len(step_starts) or None}
    if len(step_starts) > 1:
        steps = list(zip(step_starts, step_starts[1:]))
        within = [_overlap(merged, a, b) for a, b in steps]
        out.update(wait_per_step_ms=round(sum(within) / len(steps) / 1e6, 3),
                   step_without_ms=round(statistics.median(b - a - w for (a, b), w in zip(steps, within)) / 1e6, 3))
    return out


def _overlap(merged: list[list[int]], a: int, b: int) -> int:
    """How much of [a, b) the sorted, disjoint intervals ``merged`` cover."""
    covered = 0
    for lo, hi in merged[_first_ending_after(merged, a):]:
        if lo >= b:
            break
        covered += max(0, min(hi, b) - max(lo, a))
    return covered


def _first_ending_after(merged: list[list[int]], a: int) -> int:
    """The first of the sorted, disjoint intervals that ends after ``a`` (a binary search)."""
    lo, hi = 0, len(merged)
    while lo < hi:
        mid = (lo + hi) // 2
        if merged[mid][1] <= a:
            lo = mid + 1
        else:
            hi = mid
    return lo


def _robust(values: list[int]) -> tuple[float, float]:
    """The median and the robust standard deviation (1.4826 x the median absolute deviation)."""
    median = statistics.median(values)
    return float(median), 1.4826 * float(statistics.median(abs(v - median) for v in values))


SPREAD_SAMPLE = 1_000_000  # the other ranks' lateness is weighed on about this many of their arrivals, at most


def _others_lateness(con: duckdb.DuckDBPyConnection, rank: int, late: str, rows: int) -> tuple[float, float]:
    """The other ranks' median lateness and its robust spread (1.4826 x the median absolute deviation), over
    every arrival, or, of more than SPREAD_SAMPLE (``rows``: how many there are), over the arrivals at every
    k-th collective instance by its hash (the same instances every time: 16M arrivals at 16,384 ranks took
    seconds to sort twice, and a median of a million is as good a yardstick)."""
    every = -(-rows // SPREAD_SAMPLE)
    sample = f" AND hash(pg_name, seq) % {int(every)} = 0" if every > 1 else ""
    median, mad = con.execute(
        f"""WITH o AS (SELECT late FROM {late} WHERE rank <> $rank{sample}),
                m AS (SELECT median(late) AS med FROM o)
           SELECT m.med, median(abs(o.late - m.med)) FROM o, m GROUP BY m.med""",
        {"rank": rank},
    ).fetchone() or (0.0, 0.0)
    return float(median or 0.0), 1.4826 * float(mad or 0.0)


def _steps(con: duckdb.DuckDBPyConnection, pg: str | None, late: str) -> tuple[float | None, list[int]]:
    """The attempt's step, seen from the straggler's group: the median gap between consecutive calls of one
    collective from one call site (a training loop calls each site once a step), and when each step began
    (the first member's arrival at each call of the group's busiest site)."""
    rows = con.execute(
        f"""WITH c AS (SELECT seq, min(t) AS t0, min(op) || ':' || coalesce(min(stack_id)::VARCHAR, '') AS site
                       FROM {late} WHERE pg_name = $pg GROUP BY seq),
                g AS (SELECT t0, site, t0 - lag(t0) OVER (PARTITION BY site ORDER BY seq) AS gap,
                             count(*) OVER (PARTITION BY site) AS calls FROM c)
           SELECT (SELECT median(gap) / 1e6 FROM g), t0 FROM g
           WHERE site = (SELECT site FROM g ORDER BY calls DESC, site LIMIT 1) ORDER BY t0""",
        {"pg": pg},
    ).fetchall()
    gap = rows[0][0] if rows else None
    return (None if gap is None else round(float(gap), 3)), [t for _, t in rows]


def binomial_tail(k: int, n: int, p: float) -> float:
    """P(X >= k) for X ~ Binomial(n, p), summed in log space (exact for any n the dumps hold)."""
    if k <= 0:
        return 1.0
    if p <= 0.0:
        return 0.0
    if p >= 1.0:
        return 1.0
    log_p, log_q = math.log(p), math.log1p(-p)
    terms = [math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) + i * log_p + (n - i) * log_q
             for i in range(k, n + 1)]
    top = max(terms)
    return min(1.0, math.exp(top) * sum(math.exp(x - top) for x in terms))
