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
``collective_durations`` and ``watchdog_lags``, and from those two one row per
host, ``host_links``), and the report reads ``host_links`` only: one row per
host and attempt, however many collectives they ran. A host's watchdog lag is
the median of its per-attempt medians.
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

# The table ``host_links``, from the attempt's two tables above (_cd, _wl): per host, what the report takes of
# the attempt. Its collectives: every collective instance of its groups that had sibling groups, with the
# slowdown of that instance; their slowdowns go in bins of the same round(slowdown, 3), each with its
# smallest and largest slowdown, from which the report finds the exact (rounded) median over any attempts.
# (HOST_LINKS_OF: of one attempt, ``k`` "" and ``hk`` "", or of each attempt of rows keyed by job and attempt,
# ``k`` "job, attempt, " and ``hk`` "hosts.job, hosts.attempt, ")
HOST_LINKS_OF = f"""
    WITH h AS (
      SELECT {{k}}unnest(hosts) AS host, pg_desc, op, slowdown AS ratio FROM _cd
      WHERE n_groups >= 2 AND slowdown IS NOT NULL
    ), per AS (
      SELECT {{k}}host, count(*) AS collectives, count(*) FILTER (WHERE ratio >= {SLOW}) AS slow_collectives
      FROM h GROUP BY {{k}}host
    ), bins AS (
      SELECT {{k}}host,
             list(struct_pack(slowdown := b, collectives := n, low := lo, high := hi) ORDER BY b) AS slowdowns
      FROM (SELECT {{k}}host, round(ratio, 3) AS b, count(*) AS n, min(ratio) AS lo, max(ratio) AS hi
            FROM h GROUP BY ALL)
      GROUP BY {{k}}host
    ), ev AS (
      SELECT {{k}}host, list(struct_pack(pg_desc := pg_desc, op := op, collectives := n, slowdown := r)
                             ORDER BY pg_desc, op) AS by_collective
      FROM (SELECT {{k}}host, pg_desc, op, count(*) AS n, median(ratio) AS r FROM h GROUP BY ALL) GROUP BY {{k}}host
    ), hosts AS (SELECT {{k}}host FROM _wl UNION SELECT {{k}}host FROM per)
    SELECT {{hk}}hosts.host, coalesce(per.collectives, 0) AS collectives,
           coalesce(per.slow_collectives, 0) AS slow_collectives, _wl.watchdog_lag_ms,
           coalesce(bins.slowdowns, []) AS slowdowns, coalesce(ev.by_collective, []) AS by_collective
    FROM hosts LEFT JOIN _wl USING ({{k}}host) LEFT JOIN per USING ({{k}}host) LEFT JOIN bins USING ({{k}}host)
    LEFT JOIN ev USING ({{k}}host)
    ORDER BY {{hk}}hosts.host
"""
HOST_LINKS = HOST_LINKS_OF.format(k="", hk="")


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
    out["host_links"] = host_links(con, out["collective_durations"], out["watchdog_lags"])
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
# _KEEP_TIMED of the attempts ($jobs, $attempts), from relations of several attempts keyed by job and attempt (their
# groups are their names: no group keys)
_KEEP_TIMED_BATCH = """
    INSERT INTO {kept}
    SELECT e.job, e.attempt, e.pg_name, e.pg_name, e.pg_desc, e.seq, e.op, e.duration_ms, e.watchdog_lag_ms, h.hid,
           h.host
    FROM {entries} e
    JOIN (SELECT job, attempt, rank, host, dense_rank() OVER (PARTITION BY job, attempt ORDER BY host) AS hid
          FROM {dumps} JOIN (SELECT unnest($jobs) AS job, unnest($attempts) AS attempt) USING (job, attempt)) h
      USING (job, attempt, rank)
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

    def keep_batch(self, entries: str, dumps: str, keys: list[tuple[str, int]]) -> None:
        """Keep the timed entries of ``keys``, attempts whose relations were made together (``entries`` and
        ``dumps`` keyed by job and attempt: frlake.diagnose.batched), as :meth:`keep` keeps one's."""
        if keys:
            self.con.execute(_KEEP_TIMED_BATCH.format(kept=_BATCH_TIMED, entries=entries, dumps=dumps),
                             {"jobs": [job for job, _ in keys], "attempts": [attempt for _, attempt in keys]})

    def tables(self, keys: list[tuple[str, int]]) -> dict[tuple[str, int], dict[str, pa.Table]]:
        """Each of ``keys``' rows of the summary tables, in their schemas."""
        from frlake import schema

        out: dict[tuple[str, int], dict[str, pa.Table]] = {key: {} for key in keys}
        whole = {}  # each table's rows of every attempt, keyed (job, attempt), in its schema
        for name, sql in (("collective_durations", _BATCH_DURATIONS), ("watchdog_lags", _BATCH_LAGS)):
            whole[name] = _keyed(self.con.sql(sql.format(kept=_BATCH_TIMED)).to_arrow_table(), schema.TABLES[name])
        # host_links of every attempt from those two, by one statement (as host_links makes an attempt's)
        whole["host_links"] = _keyed(_host_links_rows(self.con, whole["collective_durations"],
                                                      whole["watchdog_lags"], keyed=True), schema.HOST_LINKS)
        for name, table in whole.items():
            rows = _runs(table.column("job").to_pylist(), table.column("attempt").to_pylist())
            table = table.select(schema.TABLES[name].names)
            for key in keys:
                start, stop = rows.get(key, (0, 0))
                out[key][name] = table.slice(start, stop - start)
        return out


def _keyed(table: pa.Table, columns: pa.Schema) -> pa.Table:
    """``table``'s job, attempt and ``columns`` (cast to their types)."""
    import pyarrow as pa

    keyed = pa.schema([pa.field("job", pa.string()), pa.field("attempt", pa.int64()), *columns])
    return table.select(keyed.names).cast(keyed)


def _runs(jobs: list, attempts: list) -> dict[tuple[str, int], tuple[int, int]]:
    """(job, attempt) -> the range of its rows, in rows sorted by job and attempt."""
    runs: dict[tuple[str, int], tuple[int, int]] = {}
    for i, key in enumerate(zip(jobs, attempts, strict=True)):
        start = runs[key][0] if key in runs else i
        runs[key] = (start, i + 1)
    return runs


def host_links(con: duckdb.DuckDBPyConnection, durations: pa.Table, lags: pa.Table) -> pa.Table:
    """One attempt's rows of ``host_links``, from its rows of ``collective_durations`` and
    ``watchdog_lags`` (as stored: the same values the report read before host_links existed)."""
    from frlake import schema

    return _host_links_rows(con, durations, lags).select(schema.HOST_LINKS.names).cast(schema.HOST_LINKS)


def _host_links_rows(con: duckdb.DuckDBPyConnection, durations: pa.Table, lags: pa.Table, *,
                     keyed: bool = False) -> pa.Table:
    """``HOST_LINKS_OF`` over these rows of the two tables: of one attempt, or (``keyed``) of each attempt of
    rows led by job and attempt."""
    con.register("_cd", durations)
    con.register("_wl", lags)
    try:
        sql = HOST_LINKS_OF.format(k="job, attempt, ", hk="hosts.job, hosts.attempt, ") if keyed else HOST_LINKS
        return con.sql(sql).to_arrow_table()
    finally:
        con.unregister("_cd")
        con.unregister("_wl")


def holds_summary(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> bool:
    """Whether the connection's views hold summary rows of the attempt (files
    are never written empty, so: whether it has summary files to retire)."""
    from frlake.schema import SUMMARY_TABLES

    return any(con.execute(f"SELECT 1 FROM {t} WHERE job = ? AND attempt = ? LIMIT 1", [job, attempt]).fetchall()
               for t in SUMMARY_TABLES)


# The report, over ``host_links`` of the window's attempts: one row per host and attempt. Each host gets the
# slowdown of every collective instance of the groups it was in that had siblings: their median is exact
# from the bins (each the slowdowns that round to one value, with the smallest and largest of them). The
# two middle slowdowns of a host (0-based (n-1)/2 and n/2, rounded down) fall in the first bin whose running
# count reaches n/2 (b1) and the first whose running count passes it (b2). In one bin, their mean rounds to
# that bin's value; in two, the lower is the largest of b1 and the upper the smallest of b2, and the median is
# their mean, as DuckDB's median interpolates it. The running counts are over a host's buckets of 0.05 first
# (floor(bin * 20), monotonic in bin: a few dozen per host), then over the bins of the one or two buckets that
# hold b1 and b2 (two only when b1's bucket ends exactly at n/2: then b2's is the next), counted on from the
# buckets before them; never over every bin (200,807 (host, bin) pairs at 100M entries). The watchdog's lag of a
# host is the median of its per-attempt medians.
SLOW_LINKS = f"""
    WITH att AS (
      SELECT job, attempt, started_ns FROM attempts
      WHERE ($since::BIGINT IS NULL OR started_ns >= $since) AND ($until::BIGINT IS NULL OR started_ns < $until)
    ), l AS (
      SELECT l.* FROM host_links l JOIN att USING (job, attempt)
    ), b AS (
      SELECT host, unnest(slowdowns) AS s FROM l WHERE collectives > 0
    ), bins AS (
      SELECT host, s.slowdown AS bin, sum(s.collectives) AS n, min(s.low) AS low, max(s.high) AS high
      FROM b GROUP BY host, s.slowdown
    ), coarse AS (  -- the bins in buckets of 0.05 (a few dozen per host, not thousands): where the middle falls
      SELECT host, k, n, sum(n) OVER (PARTITION BY host) AS total,
             sum(n) OVER (PARTITION BY host ORDER BY k ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS upto
      FROM (SELECT host, floor(bin * 20) AS k, sum(n) AS n FROM bins GROUP BY ALL)
    ), cmid AS (  -- the buckets of b1 and b2 (one, or two next to each other), and how many come before them
      SELECT host, min(total) AS total, min(k) FILTER (WHERE 2 * upto >= total) AS k1,
             min(k) FILTER (WHERE 2 * upto > total) AS k2, min(upto - n) FILTER (WHERE 2 * upto >= total) AS before
      FROM coarse GROUP BY host
    ), run AS (  -- the bins of those buckets, counted on from the buckets before them
      SELECT bins.host, bin, low, high, cmid.total,
             cmid.before + sum(n) OVER (PARTITION BY bins.host ORDER BY bin
                                        ROWS BETWEEN UNBOUNDED PRECEDING AND CURRENT ROW) AS upto
      FROM bins JOIN cmid ON bins.host = cmid.host AND (floor(bins.bin * 20) = cmid.k1 OR floor(bins.bin * 20) = cmid.k2)
    ), mid AS (
      SELECT host, min(bin) FILTER (WHERE 2 * upto >= total) AS b1, min(bin) FILTER (WHERE 2 * upto > total) AS b2
      FROM run GROUP BY host
    ), med AS (
      SELECT mid.host, CASE WHEN mid.b1 = mid.b2 THEN mid.b1 ELSE r1.high + (r2.low - r1.high) * 0.5 END AS slowdown
      FROM mid JOIN run r1 ON r1.host = mid.host AND r1.bin = mid.b1 JOIN run r2 ON r2.host = mid.host AND r2.bin = mid.b2
    ), per AS (
      SELECT host, sum(collectives)::BIGINT AS collectives, count(*) AS attempts, count(DISTINCT job) AS jobs,
             sum(slow_collectives)::BIGINT AS slow_collectives
      FROM l WHERE collectives > 0 GROUP BY host
    ), e AS (
      SELECT host, job, attempt, unnest(by_collective) AS c FROM l WHERE collectives > 0
    ), ev AS (
      SELECT host, list(struct_pack(job := job, attempt := attempt, pg_desc := c.pg_desc, op := c.op,
                                    slowdown := round(c.slowdown, 3), collectives := c.collectives)
                        ORDER BY job, attempt, c.pg_desc, c.op) AS evidence
      FROM e GROUP BY host
    ), lag AS (
      SELECT host, median(watchdog_lag_ms) AS watchdog_lag_ms FROM l GROUP BY host
    )
    SELECT per.host, round(med.slowdown, 3) AS slowdown,
           round((p + {Z}^2 / (2 * n) - {Z} * sqrt(p * (1 - p) / n + {Z}^2 / (4 * n * n))) / (1 + {Z}^2 / n), 4)
             AS confidence,
           per.slow_collectives, per.collectives, per.attempts, per.jobs,
           round(lag.watchdog_lag_ms, 3) AS watchdog_lag_ms, ev.evidence
    FROM (SELECT *, slow_collectives / collectives AS p, collectives::DOUBLE AS n FROM per) per
    JOIN med USING (host) JOIN ev USING (host) LEFT JOIN lag USING (host)
    ORDER BY confidence DESC, slowdown DESC, host
"""


def slow_link_verdict(row: Row) -> Row:
    """``verdict``: ``slow_link`` only for a slowdown of 1.5x or more seen in
    at least two attempts and eight collectives with a confidence above one
    half; hosts seen once, or only beside a slow host, stay ``ok``."""
    slow = (row["slowdown"] >= SLOW and row["confidence"] > 0.5 and row["attempts"] >= 2
            and row["collectives"] >= MIN_COLLECTIVES)
    return {**row, "verdict": "slow_link" if slow else "ok"}
