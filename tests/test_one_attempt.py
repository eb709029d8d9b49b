"""A statement over one attempt of one per-attempt view reads that attempt's
files only (frlake.query.connect.one_attempt), and gives the rows it gives
over every file; any other statement reads every file."""

from __future__ import annotations

import pytest

from frlake.query.connect import one_attempt
from frlake.session import Frlake

ONE = [
    ("SELECT * FROM collectives WHERE job = 'x' AND attempt = 3 AND len(missing) > 0 ORDER BY pg", ("x", 3)),
    ("select count(*) from entries e where e.job = 'a' and e.attempt = 0", ("a", 0)),
    ("SELECT rank, count(*) FROM entries WHERE 'x' = job AND attempt = 3 GROUP BY rank", ("x", 3)),
]
EVERY = [
    "SELECT * FROM collectives WHERE job = 'x' OR attempt = 3",  # not required
    "SELECT * FROM collectives WHERE job = 'x'",  # every attempt of the job
    "SELECT * FROM collectives WHERE job = 'x' AND attempt = 3 AND rank IN (SELECT rank FROM dumps)",  # another read
    "SELECT * FROM hosts WHERE job = 'x' AND attempt = 3",  # a view over every attempt
    "SELECT * FROM jobs WHERE job = 'x' AND attempt = 3",  # the catalog
    "WITH a AS (SELECT 1 AS one) SELECT * FROM entries, a WHERE job = 'x' AND attempt = 3",
    "SELECT * FROM entries WHERE job = 'x' AND attempt = 3 UNION ALL SELECT * FROM entries",
    "SELECT * FROM entries WHERE job = 'x' AND attempt = '3'",  # text, not a number
    "SELECT * FROM entries WHERE job = 'x' AND attempt = 3 AND job = 'y'",
    "not SQL",
]


@pytest.mark.parametrize(("sql", "want"), ONE)
def test_a_statement_over_one_attempt_names_it(sql, want):
    assert one_attempt(sql) == want


@pytest.mark.parametrize("sql", EVERY)
def test_any_other_statement_reads_every_file(sql):
    assert one_attempt(sql) is None


def test_the_rows_of_one_attempt_are_those_over_every_file(corpus_fl: Frlake):
    con = corpus_fl.connect(catalog_views=("attempts",))
    keys = con.execute("SELECT job, attempt FROM attempts ORDER BY job, attempt").fetchall()
    assert len(keys) >= 2
    for job, attempt in keys[:3]:
        for view in ("collectives", "entries", "rank_progress"):
            sql = f"SELECT * FROM {view} WHERE job = '{job}' AND attempt = {attempt} ORDER BY ALL"
            assert one_attempt(sql) == (job, attempt)
            with corpus_fl.sandbox() as every:
                want = every.run(sql).rows
            assert corpus_fl.query(sql).rows == want
            assert want or view == "rank_progress"  # every attempt of the corpus has entries and collectives
            with corpus_fl.sandbox(partition=(job, attempt)) as one:
                assert one.run(f"SELECT count(DISTINCT (job, attempt)) FROM {view}").rows[0][0] <= 1
