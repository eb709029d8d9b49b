"""Slow links and fail-slow hosts: ranks that arrive on time but whose
collectives take longer.

Late arrival shows a slow rank; a slow link (a NIC, a cable, a switch port)
shows instead as the same collective taking longer in the groups that cross
it. Where dumps carry ``duration_ms`` (NCCL with TORCH_NCCL_ENABLE_TIMING),
each collective instance of a group (its members' median duration) is
compared with the same collective (same description, sequence id and op) in
the sibling groups of the attempt; each host of a group gets that group's
slowdown. Across collectives, attempts and jobs a slow host keeps its
slowdown while the hosts it happened to share a group with do not.

The watchdog's lag, (completed - started, as the watchdog discovered them)
- duration, is reported beside it: a late watchdog stretches the discovered
times, not the measured duration, so it is never taken for a slow link.
"""

from __future__ import annotations

Z = 1.96
SLOW = 1.5  # a collective at least this many times its siblings' median counts as slow
MIN_COLLECTIVES = 8

# The completed, timed collective entries of the window's attempts.
_TIMED = """
      FROM entries e JOIN att USING (job, attempt)
      WHERE e.duration_ms IS NOT NULL AND e.duration_ms > 0 AND NOT e.is_p2p AND e.state = 'completed'
        AND e.collective_seq_id IS NOT NULL"""

# One pass over the entries groups them by collective instance and host (each host once, so no DISTINCT
# aggregate, which DuckDB would plan as another pass over every entry); the watchdog's lag is a second,
# plain scan. Neither is a CTE read twice, which DuckDB would materialize (bench/README.md, "Reports at scale").
SLOW_LINKS = f"""
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    ), eh AS (  -- one host's entries of one collective instance of one group
      SELECT e.job, e.attempt, e.pg_desc, e.collective_seq_id AS seq, e.op, e.pg_name, e.host,
             list(e.duration_ms) AS durations{_TIMED}
      GROUP BY ALL
    ), g AS (  -- one collective instance of one group: its members' median duration, and its hosts
      SELECT job, attempt, pg_desc, seq, op, pg_name, list_median(flatten(list(durations))) AS d,
             list_sort(list(host)) AS hosts
      FROM eh GROUP BY ALL
    ), s AS (  -- against the same collective in the sibling groups
      SELECT *, d / nullif(median(d) OVER w, 0) AS ratio, count(*) OVER w AS n_groups
      FROM g WINDOW w AS (PARTITION BY job, attempt, pg_desc, seq, op)
    ), h AS (
      SELECT unnest(hosts) AS host, job, attempt, pg_desc, op, ratio FROM s WHERE n_groups >= 2 AND ratio IS NOT NULL
    ), per AS (
      SELECT host, median(ratio) AS slowdown, count(*) AS collectives, count(DISTINCT (job, attempt)) AS attempts,
             count(DISTINCT job) AS jobs, count(*) FILTER (WHERE ratio >= {SLOW}) AS slow_collectives
      FROM h GROUP BY host
    ), ev AS (
      SELECT host, list(struct_pack(job := job, attempt := attempt, pg_desc := pg_desc, op := op,
                                    slowdown := round(r, 3), collectives := n) ORDER BY job, attempt, pg_desc, op) AS evidence
      FROM (SELECT host, job, attempt, pg_desc, op, median(ratio) AS r, count(*) AS n FROM h GROUP BY ALL) GROUP BY host
    ), lag AS (
      SELECT e.host,
             median((e.time_discovered_completed_ns - e.time_discovered_started_ns) / 1e6 - e.duration_ms)
               AS watchdog_lag_ms{_TIMED}
      GROUP BY e.host
    )
    SELECT per.host, round(per.slowdown, 3) AS slowdown,
           round((p + {Z}^2 / (2 * n) - {Z} * sqrt(p * (1 - p) / n + {Z}^2 / (4 * n * n))) / (1 + {Z}^2 / n), 4)
             AS confidence,
           per.slow_collectives, per.collectives, per.attempts, per.jobs,
           round(lag.watchdog_lag_ms, 3) AS watchdog_lag_ms, ev.evidence
    FROM (SELECT *, slow_collectives / collectives AS p, collectives::DOUBLE AS n FROM per) per
    JOIN ev USING (host) LEFT JOIN lag USING (host)
    ORDER BY confidence DESC, slowdown DESC, host
"""


def slow_link_verdict(row: dict) -> dict:
    """``verdict``: ``slow_link`` only for a slowdown of 1.5x or more seen in
    at least two attempts and eight collectives with a confidence above one
    half; hosts seen once, or only beside a slow host, stay ``ok``."""
    slow = (row["slowdown"] >= SLOW and row["confidence"] > 0.5 and row["attempts"] >= 2
            and row["collectives"] >= MIN_COLLECTIVES)
    return {**row, "verdict": "slow_link" if slow else "ok"}
