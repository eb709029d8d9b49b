"""host_links: a host's median slowdown over many attempts, found by the
slow-links report from per-attempt bins, is the median of every slowdown,
rounded as the report rounds it; and the counts and evidence are those of
the rows of collective_durations they come from."""

from __future__ import annotations

import random

import duckdb
import pyarrow as pa
import pytest

from frlake import schema
from frlake.query.links import SLOW, SLOW_LINKS, host_links

HOSTS = ["h0", "h1", "h2", "h3"]


def _durations(rng: random.Random, n: int, spread: float) -> pa.Table:
    """An attempt's collective_durations: n collective instances of groups of 1-3 hosts, with slowdowns
    drawn near 1 (some exactly on a rounding boundary, some repeated), a few without siblings."""
    rows = []
    for seq in range(n):
        ratio = rng.choice([round(rng.uniform(1 - spread, 1 + spread), rng.choice([3, 4, 6, 12])),
                            1.0005, 1.0015, 0.9995, 1.5, 1.4995, 3.0, rng.uniform(0.5, 4)])
        rows.append({"pg_name": str(seq % 3), "pg_desc": rng.choice(["dp", "tp", None]), "seq": seq,
                     "op": rng.choice(["all_reduce", "all_gather"]), "duration_ms": ratio,
                     "entries": 8, "hosts": sorted(rng.sample(HOSTS, rng.randint(1, 3))),
                     "n_groups": rng.choice([1, 2, 4, 4, 4]), "sibling_median_ms": 1.0,
                     "slowdown": ratio if rng.random() > 0.02 else None})
    return pa.Table.from_pylist(rows, schema=schema.COLLECTIVE_DURATIONS)


@pytest.mark.parametrize("seed", range(6))
def test_the_median_from_the_bins_is_the_median_of_every_slowdown(seed):
    rng = random.Random(seed)
    con = duckdb.connect()
    links, durations, attempts = [], [], []
    for a in range(rng.randint(1, 6)):
        job = f"job-{a % 2}"
        d = _durations(rng, rng.randint(1, 400), rng.choice([0.001, 0.01, 0.3]))
        lags = pa.Table.from_pylist([{"host": h, "entries": 1, "watchdog_lag_ms": rng.uniform(0, 5)} for h in HOSTS],
                                    schema=schema.WATCHDOG_LAGS)
        hl = host_links(con, d, lags)
        links.append(hl.append_column("job", pa.array([job] * hl.num_rows)).append_column(
            "attempt", pa.array([a] * hl.num_rows, pa.int64())))
        durations.append(d.append_column("job", pa.array([job] * d.num_rows)).append_column(
            "attempt", pa.array([a] * d.num_rows, pa.int64())))
        attempts.append({"job": job, "attempt": a, "started_ns": a})
    con.register("host_links", pa.concat_tables(links))
    con.register("cd", pa.concat_tables(durations))
    con.register("attempts", pa.Table.from_pylist(attempts))
    got = con.execute(SLOW_LINKS, {"since": None, "until": None}).fetchall()
    want = con.execute(f"""
        WITH h AS (SELECT unnest(hosts) AS host, job, attempt, pg_desc, op, slowdown AS ratio FROM cd
                   WHERE n_groups >= 2 AND slowdown IS NOT NULL)
        SELECT host, round(median(ratio), 3), count(*), count(DISTINCT (job, attempt)), count(DISTINCT job),
               count(*) FILTER (WHERE ratio >= {SLOW}),
               (SELECT list(struct_pack(job := job, attempt := attempt, pg_desc := pg_desc, op := op,
                                        slowdown := round(r, 3), collectives := n) ORDER BY job, attempt, pg_desc, op)
                FROM (SELECT job, attempt, pg_desc, op, median(ratio) AS r, count(*) AS n FROM h h2
                      WHERE h2.host = h.host GROUP BY ALL))
        FROM h GROUP BY host ORDER BY host""").fetchall()
    assert want, "no host with siblings: draw again"
    columns = ("host", "slowdown", "collectives", "attempts", "jobs", "slow_collectives", "evidence")
    mine = sorted((r[0], r[1], r[4], r[5], r[6], r[3], r[8]) for r in got)
    assert [dict(zip(columns, r)) for r in mine] == [dict(zip(columns, r)) for r in want]


@pytest.mark.parametrize("ratios", [
    [0.97, 0.98, 1.02, 1.03],  # the two middle slowdowns in two buckets next to each other (0.95-1 and 1-1.05)
    [0.5, 0.51, 2.0, 3.0],  # ... in two buckets far apart, none between them
    [0.949, 0.9501, 0.9502, 1.0],  # on the buckets' edges
    [1.0, 1.0, 1.0004, 1.0006, 1.2],  # odd: the middle one alone
    [0.2, 0.9, 1.4, 1.6, 7.5, 8.0],
])
def test_the_median_is_exact_where_the_middle_falls_across_buckets(ratios):
    """The report finds a host's bucket of 0.05 first, then the bins in it: the two middle slowdowns may
    sit in two buckets, next to each other or far apart, and the median is still their mean, as DuckDB's."""
    con = duckdb.connect()
    rows = [{"pg_name": "0", "pg_desc": "dp", "seq": i, "op": "all_reduce", "duration_ms": r, "entries": 8,
             "hosts": ["h0"], "n_groups": 2, "sibling_median_ms": 1.0, "slowdown": r} for i, r in enumerate(ratios)]
    lags = pa.Table.from_pylist([{"host": "h0", "entries": 1, "watchdog_lag_ms": 0.0}], schema=schema.WATCHDOG_LAGS)
    links = []
    for a in range(2):  # the same slowdowns in two attempts: the counts double, the median stays
        hl = host_links(con, pa.Table.from_pylist(rows, schema=schema.COLLECTIVE_DURATIONS), lags)
        links.append(hl.append_column("job", pa.array(["j"] * hl.num_rows)).append_column(
            "attempt", pa.array([a] * hl.num_rows, pa.int64())))
    con.register("host_links", pa.concat_tables(links))
    con.register("attempts", pa.Table.from_pylist([{"job": "j", "attempt": a, "started_ns": a} for a in range(2)]))
    got = con.execute(SLOW_LINKS, {"since": None, "until": None}).fetchall()
    want = con.execute("SELECT round(median(r), 3) FROM (SELECT unnest(?::DOUBLE[]) AS r)", [ratios * 2]).fetchone()[0]
    assert [r[1] for r in got] == [want]
