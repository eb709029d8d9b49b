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

Everything up to a host's share of each collective is per attempt, so it is
computed once, when the attempt is diagnosed, from the entries the diagnosis
read (:func:`summary_tables`, stored by frlake.storage.summary_tables in the tables
``collective_durations`` and ``watchdog_lags``), and the report reads those
rows, not the entries. A
host's watchdog lag is the median of its per-attempt medians.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import duckdb
    import pyarrow as pa

    from frlake.query.vocabulary import Relations
    from frlake.values import Row

Z = 1.96
SLOW = 1.5  # a collective at least this many times its siblings' median counts as slow
MIN_COLLECTIVES = 8

# Per attempt, from the entries the diagnosis read (frlake.query.vocabulary.NEWEST_DUMP: each rank's newest dump, so an
# entry a rank dumped twice counts once, and groups that share a name told apart by their members): the
# completed, timed collective entries, each with its host as a number (hid), since lists of numbers
# aggregate several times faster than lists of strings.
_TIMED = """
    WITH t AS (
      SELECT e.pg_name, e.pg_desc, e.seq, e.op, e.duration_ms, e.watchdog_lag_ms, h.hid
      FROM {entries} e JOIN _hid h USING (rank)
      WHERE e.duration_ms > 0 AND NOT e.is_p2p AND e.state = 'completed' AND e.seq IS NOT NULL
    )"""
# Each host's number: its place in the list of the attempt's hosts ($hosts, a constant of the query).
_HOST_IDS = "SELECT rank, host, dense_rank() OVER (ORDER BY host) AS hid FROM {dumps}"

# The table ``collective_durations``: one row per collective instance of one group, its members' median
# duration, compared with the same collective (description, sequence id and op) in the attempt's sibling
# groups: a GROUP BY joined back, not a window, whose median DuckDB recomputes for every row of a
# partition (quadratic in the number of sibling groups: 2,048 tp groups at 16,384 ranks). The entries are
# grouped by host first, so a group's list of hosts is built from one row per host, never one per entry
# (a world group of 16,384 ranks on 2,048 hosts).
COLLECTIVE_DURATIONS = _TIMED + """, eh AS (  -- one host's entries of one collective instance of one group
      SELECT pg_name, pg_desc, seq, op, hid, list(duration_ms) AS durations FROM t GROUP BY ALL
    ), g AS (  -- one collective instance of one group: its members' median duration, and its hosts
      SELECT pg_name, pg_desc, seq, op, list_median(flatten(list(durations))) AS duration_ms,
             sum(len(durations))::BIGINT AS entries, list_sort(list(hid)) AS hids
      FROM eh GROUP BY ALL
    ), sib AS (  -- the same collective in every group of the attempt
      SELECT pg_desc, seq, op, count(*) AS n_groups, median(duration_ms) AS sibling_median_ms FROM g GROUP BY ALL
    ), named AS (  -- a group's key back to the name it was given
      SELECT DISTINCT pg, pg_name FROM {group_keys}
    )
    SELECT coalesce(k.pg_name, g.pg_name) AS pg_name, g.pg_desc, g.seq, g.op, g.duration_ms, g.entries,
           list_transform(g.hids, lambda i: CAST($hosts AS VARCHAR[])[i]) AS hosts, sib.n_groups, sib.sibling_median_ms,
           g.duration_ms / nullif(sib.sibling_median_ms, 0) AS slowdown
    FROM g JOIN sib ON g.pg_desc IS NOT DISTINCT FROM sib.pg_desc AND g.seq = sib.seq AND g.op IS NOT DISTINCT FROM sib.op
    LEFT JOIN named k ON k.pg = g.pg_name
    ORDER BY g.pg_desc, g.seq, g.op, coalesce(k.pg_name, g.pg_name), g.pg_name
"""

# The table ``watchdog_lags``: per host, the watchdog's lag.
WATCHDOG_LAGS = _TIMED + """
    SELECT CAST($hosts AS VARCHAR[])[hid] AS host, count(*) AS entries, median(watchdog_lag_ms) AS watchdog_lag_ms
    FROM t GROUP BY hid ORDER BY hid
"""

SUMMARIES = {"collective_durations": COLLECTIVE_DURATIONS, "watchdog_lags": WATCHDOG_LAGS}


def summary_tables(con: duckdb.DuckDBPyConnection, rel: Relations | None = None) -> dict[str, pa.Table]:
    """One attempt's rows of the summary tables (frlake.schema.SUMMARY_TABLES),
    in their schemas, from a connection on which the attempt was just
    diagnosed (its relations, ``rel``, built by the diagnosis)."""
    from frlake import schema
    from frlake.query.vocabulary import Relations

    rel = rel or Relations()
    names = {"dumps": rel.dumps, "entries": rel.entries, "group_keys": rel.group_keys}
    con.execute(f"CREATE OR REPLACE TEMP TABLE _hid AS {_HOST_IDS.format(**names)}")
    hosts = con.execute("SELECT list(host ORDER BY hid) FROM (SELECT DISTINCT hid, host FROM _hid)").fetchall()[0][0]
    out = {}
    for name, sql in SUMMARIES.items():
        table = con.sql(sql.format(**names), params={"hosts": hosts or []}).to_arrow_table()
        out[name] = table.select(schema.TABLES[name].names).cast(schema.TABLES[name])
    return out


# A batch of attempts (frlake.query.batch): each attempt's completed, timed collective entries, as _TIMED
# reads them, kept as it is diagnosed (one INSERT: its host as a number and as a name, its group's key back
# to the name it was given), then each summary table made for all of them by one statement, keyed by
# (job, attempt): the statements above, attempt by attempt, cost more to plan than to run on a small attempt.
_BATCH_TIMED = "_bs_t"
_KEEP_TIMED = """
    INSERT INTO {kept}
    SELECT $job, $attempt, e.pg_name, coalesce(k.pg_name, e.pg_name), e.pg_desc, e.seq, e.op, e.duration_ms,
           e.watchdog_lag_ms, h.hid, h.host
    FROM {entries} e JOIN (""" + _HOST_IDS + """) h USING (rank)
    LEFT JOIN (SELECT DISTINCT pg, pg_name FROM {group_keys}) k ON k.pg = e.pg_name
    WHERE e.duration_ms > 0 AND NOT e.is_p2p AND e.state = 'completed' AND e.seq IS NOT NULL
"""
_BATCH_DURATIONS = """
    WITH eh AS (
      SELECT job, attempt, pg_name, name, pg_desc, seq, op, hid, host, list(duration_ms) AS durations
      FROM {kept} GROUP BY ALL
    ), g AS (
      SELECT job, attempt, pg_name, name, pg_desc, seq, op, list_median(flatten(list(durations))) AS duration_ms,
             sum(len(durations))::BIGINT AS entries, list(host ORDER BY hid) AS hosts
      FROM eh GROUP BY job, attempt, pg_name, name, pg_desc, seq, op
    ), sib AS (
      SELECT job, attempt, pg_desc, seq, op, count(*) AS n_groups, median(duration_ms) AS sibling_median_ms
      FROM g GROUP BY ALL
    )
    SELECT g.job, g.attempt, g.name AS pg_name, g.pg_desc, g.seq, g.op, g.duration_ms, g.entries, g.hosts,
           sib.n_groups, sib.sibling_median_ms, g.duration_ms / nullif(sib.sibling_median_ms, 0) AS slowdown
    FROM g JOIN sib ON g.job = sib.job AND g.attempt = sib.attempt AND g.pg_desc IS NOT DISTINCT FROM sib.pg_desc
      AND g.seq = sib.seq AND g.op IS NOT DISTINCT FROM sib.op
    ORDER BY g.job, g.attempt, g.pg_desc, g.seq, g.op, g.name, g.pg_name
"""
_BATCH_LAGS = """
    SELECT job, attempt, any_value(host) AS host, count(*) AS entries, median(watchdog_lag_ms) AS watchdog_lag_ms
    FROM {kept} GROUP BY job, attempt, hid ORDER BY job, attempt, hid
"""


class BatchSummaries:
    """The summary tables' rows of a batch's attempts, diagnosed one after another on ``con``: :meth:`keep`
    after each diagnosis, :meth:`tables` once at the end: each attempt's rows, as :func:`summary_tables`
    gives them."""

    def __init__(self, con: duckdb.DuckDBPyConnection):
        self.con = con
        con.execute(f"""CREATE OR REPLACE TEMP TABLE {_BATCH_TIMED} (job VARCHAR, attempt BIGINT, pg_name VARCHAR,
                        name VARCHAR, pg_desc VARCHAR, seq BIGINT, op VARCHAR, duration_ms DOUBLE,
                        watchdog_lag_ms DOUBLE, hid BIGINT, host VARCHAR)""")

    def keep(self, job: str, attempt: int, rel: Relations | None = None) -> None:
        """Keep the timed entries of the attempt just diagnosed (its relations, ``rel``)."""
        from frlake.query.vocabulary import Relations

        rel = rel or Relations()
        self.con.execute(_KEEP_TIMED.format(kept=_BATCH_TIMED, entries=rel.entries, dumps=rel.dumps,
                                            group_keys=rel.group_keys), {"job": job, "attempt": attempt})

    def tables(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, pa.Table]]:
        """Each of ``keys``' rows of the summary tables, in their schemas."""
        from frlake import schema

        out: dict[tuple[str, int], dict[str, pa.Table]] = {key: {} for key in keys}
        for name, sql in (("collective_durations", _BATCH_DURATIONS), ("watchdog_lags", _BATCH_LAGS)):
            table = self.con.sql(sql.format(kept=_BATCH_TIMED)).to_arrow_table()
            rows = _runs(table.column("job").to_pylist(), table.column("attempt").to_pylist())
            table = table.select(schema.TABLES[name].names).cast(schema.TABLES[name])
            for key in keys:
                start, stop = rows.get(key, (0, 0))
                out[key][name] = table.slice(start, stop - start)
        return out


def _runs(jobs: list, attempts: list) -> dict[tuple[str, int], tuple[int, int]]:
    """(job, attempt) -> the range of its rows, in rows sorted by job and attempt."""
    runs: dict[tuple[str, int], tuple[int, int]] = {}
    for i, key in enumerate(zip(jobs, attempts, strict=True)):
        start = runs[key][0] if key in runs else i
        runs[key] = (start, i + 1)
    return runs


def holds_summary(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> bool:
    """Whether the connection's views hold summary rows of the attempt (files
    are never written empty, so: whether it has summary files to retire)."""
    from frlake.schema import SUMMARY_TABLES

    return any(con.execute(f"SELECT 1 FROM {t} WHERE job = ? AND attempt = ? LIMIT 1", [job, attempt]).fetchall()
               for t in SUMMARY_TABLES)


# The report, over the summary tables of the window's attempts (1/group size of the timed entries): each
# host gets the slowdown of every collective instance of the groups it was in that had siblings. The
# watchdog's lag of a host is the median of its per-attempt medians.
SLOW_LINKS = f"""
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    ), h AS (
      SELECT unnest(c.hosts) AS host, c.job, c.attempt, c.pg_desc, c.op, c.slowdown AS ratio
      FROM collective_durations c JOIN att USING (job, attempt)
      WHERE c.n_groups >= 2 AND c.slowdown IS NOT NULL
    ), per AS (
      SELECT host, median(ratio) AS slowdown, count(*) AS collectives, count(DISTINCT (job, attempt)) AS attempts,
             count(DISTINCT job) AS jobs, count(*) FILTER (WHERE ratio >= {SLOW}) AS slow_collectives
      FROM h GROUP BY host
    ), ev AS (
      SELECT host, list(struct_pack(job := job, attempt := attempt, pg_desc := pg_desc, op := op,
                                    slowdown := round(r, 3), collectives := n) ORDER BY job, attempt, pg_desc, op) AS evidence
      FROM (SELECT host, job, attempt, pg_desc, op, median(ratio) AS r, count(*) AS n FROM h GROUP BY ALL) GROUP BY host
    ), lag AS (
      SELECT w.host, median(w.watchdog_lag_ms) AS watchdog_lag_ms
      FROM watchdog_lags w JOIN att USING (job, attempt) GROUP BY w.host
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


def slow_link_verdict(row: Row) -> Row:
    """``verdict``: ``slow_link`` only for a slowdown of 1.5x or more seen in
    at least two attempts and eight collectives with a confidence above one
    half; hosts seen once, or only beside a slow host, stay ``ok``."""
    slow = (row["slowdown"] >= SLOW and row["confidence"] > 0.5 and row["attempts"] >= 2
            and row["collectives"] >= MIN_COLLECTIVES)
    return {**row, "verdict": "slow_link" if slow else "ok"}
