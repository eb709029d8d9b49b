"""The SQL sandbox and the views, over the real corpus."""

from __future__ import annotations

import pyarrow.dataset as ds
import pytest

from frlake.errors import QueryError
from frlake.query import QueryLimits
from frlake.query.names import ALL_VIEW_NAMES
from frlake.query.statements import views_read
from frlake.session import Frlake


@pytest.mark.parametrize(
    "sql, message",
    [
        ("SELECT * FROM read_csv('/etc/passwd')", "outside the lake"),
        ("SELECT * FROM read_text('/etc/hostname')", "outside the lake"),
        ("COPY (SELECT 1) TO '/tmp/frlake-copy.csv'", "COPY"),
        ("COPY entries TO 'x.parquet'", "COPY"),
        ("ATTACH '/tmp/frlake-attach.db' AS x", "ATTACH"),
        ("INSTALL httpfs", "only SELECT"),
        ("LOAD httpfs", "only SELECT"),
        ("SET enable_external_access = true", "SET"),
        ("PRAGMA version", "PRAGMA"),
        ("SELECT 1; SELECT 2", "exactly one statement"),
        ("CREATE TABLE t AS SELECT 1", "CREATE"),
        ("DROP VIEW entries", "DROP"),
        ("SELECT * FROM nonsense_table", "nonsense_table"),
    ],
)
def test_sandbox_refuses_with_a_clear_error(corpus_fl, sql, message):
    with pytest.raises(QueryError) as info:
        corpus_fl.query(sql)
    assert message.lower() in str(info.value).lower()


def test_catalog_file_is_not_readable_from_sql(corpus_fl):
    with pytest.raises(QueryError):
        corpus_fl.query(f"SELECT * FROM read_blob('{corpus_fl.settings.lake / 'catalog.db'}')")


def test_runaway_query_stops_at_the_time_limit(corpus_fl):
    with pytest.raises(QueryError) as info:
        corpus_fl.query("SELECT count(*) FROM range(1000000000000) a, range(1000) b", QueryLimits(timeout_s=1.0))
    assert "limit" in str(info.value)


def test_row_cap_truncates(corpus_fl):
    result = corpus_fl.query("SELECT * FROM entries", QueryLimits(max_rows=10))
    assert len(result.rows) == 10 and result.truncated


@pytest.mark.parametrize("sql, views", [
    ("SELECT 1", set()),
    ("select count(*) from Entries e join jobs using (job)", {"entries", "jobs"}),
    ("WITH x AS (SELECT * FROM incidents) SELECT * FROM x", {"incidents"}),
    ("WITH jobs AS (SELECT * FROM jobs) SELECT * FROM jobs", {"jobs"}),  # the CTE reads the view
    ("SELECT (SELECT count(*) FROM files) UNION ALL SELECT count(*) FROM collectives", {"files", "collectives"}),
    ("EXPLAIN ANALYZE SELECT * FROM culprits", {"culprits"}),
    ("DESCRIBE entries", {"entries"}),
    ("SUMMARIZE SELECT * FROM dumps", {"dumps"}),
    ("SHOW TABLES", None),  # lists every view
    ("SELECT * FROM duckdb_views()", None),
    ("SELECT * FROM main.entries", None),
    ("SELECT * FROM nonsense_table", None),  # DuckDB's error then suggests the views' names
])
def test_a_statement_says_which_views_it_reads(sql, views):
    assert views_read(sql, ALL_VIEW_NAMES) == (None if views is None else frozenset(views))


@pytest.mark.parametrize("sql", [
    "SELECT job, count(*) AS n FROM entries JOIN jobs USING (job) GROUP BY ALL ORDER BY ALL",
    "SELECT verdict, count(*) FROM incidents GROUP BY ALL ORDER BY ALL",
    "SELECT count(*), sum(len(missing)) FROM collectives",
    "SELECT count(*) FROM files",
    "WITH h AS (SELECT * FROM hosts) SELECT * FROM h ORDER BY host",
    "SHOW TABLES",
])
def test_a_query_over_the_views_it_names_gives_what_every_view_gives(corpus_fl, sql):
    with corpus_fl.sandbox() as every:
        assert corpus_fl.query(sql).rows == every.run(sql).rows


def test_a_query_of_no_view_opens_no_catalog(corpus_lake):
    with Frlake(corpus_lake) as session:
        assert session.query("SELECT 42 AS answer").rows == [(42,)]
        assert session._catalog is None
        assert session.query("SELECT count(*) > 0 FROM jobs").rows == [(True,)]
        assert session._catalog is not None


def test_with_and_explain_are_queries(corpus_fl):
    assert corpus_fl.query("WITH x AS (SELECT 1 AS a) SELECT a FROM x").rows == [(1,)]
    assert corpus_fl.query("EXPLAIN SELECT count(*) FROM entries").rows


def test_times_also_as_timestamps(corpus_lake, views):
    con = views(corpus_lake.lake)
    row = con.execute("SELECT time_created_ns, epoch_ns(time_created) FROM entries LIMIT 1").fetchone()
    assert row[0] // 1000 * 1000 == row[1]
    assert con.execute("SELECT count(*) FROM hosts").fetchone()[0] == 15


def test_a_second_engine_reads_the_lake_as_it_is(corpus_lake, views):
    con = views(corpus_lake.lake)
    for table in ("entries", "dumps", "groups", "pg_status"):
        dataset = ds.dataset(corpus_lake.lake / "tables" / table, format="parquet", partitioning="hive")
        assert dataset.count_rows() == con.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
        per_job = dataset.to_table(columns=["job"]).group_by("job").aggregate([("job", "count")])
        expected = dict(con.execute(f"SELECT job, count(*) FROM {table} GROUP BY job").fetchall())
        assert dict(zip(per_job["job"].to_pylist(), per_job["job_count"].to_pylist())) == expected
    stacks = ds.dataset(corpus_lake.lake / "tables" / "stacks", format="parquet")
    assert stacks.count_rows() == con.execute("SELECT count(*) FROM stacks").fetchone()[0]


def test_a_catalog_view_is_read_when_a_query_reads_it(corpus_fl):
    """Connecting reads no catalog view: each is read from the catalog by the first query that reads it,
    once per connection, with the same rows as before (the files view: 28 ingested files)."""
    from sqlalchemy import event

    from frlake.query.catalog_views import catalog_table

    statements: list[str] = []

    def seen(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(corpus_fl.catalog.engine, "before_cursor_execute", seen)
    try:
        con = corpus_fl.connect()
        assert not [s for s in statements if "FROM files" in s or "FROM attempts" in s]
        expected = catalog_table(corpus_fl.catalog, "files").num_rows
        statements.clear()
        assert con.execute("SELECT count(*) FROM files").fetchone()[0] == expected
        assert con.execute("SELECT count(*) FROM files f JOIN files g USING (path)").fetchone()[0] == expected
        assert len([s for s in statements if "FROM files" in s]) == 1
        assert not [s for s in statements if "FROM attempts" in s]
        statements.clear()
        result = corpus_fl.query("SELECT count(*) FROM files WHERE status = 'ingested'")  # the sandbox, locked down
        assert result.rows == [(expected,)]
        assert len([s for s in statements if "FROM files" in s]) == 1
    finally:
        event.remove(corpus_fl.catalog.engine, "before_cursor_execute", seen)


def test_a_connection_of_some_lake_tables_has_no_view_of_the_others(corpus_fl):
    """A fleet report's connection lists the files of the lake tables it reads only: the others' views,
    and the derived views over them, are not there (a query of one fails by its name, never reads nothing)."""
    import duckdb

    from frlake.query.connect import connect

    every = corpus_fl.connect()
    con = connect(corpus_fl.catalog, corpus_fl.lake, catalog_views=("attempts",), lake_tables=("host_links",))
    try:
        assert (con.execute("SELECT count(*) FROM host_links").fetchone()
                == every.execute("SELECT count(*) FROM host_links").fetchone())
        for name in ("entries", "dumps", "collectives", "hosts", "files"):
            with pytest.raises(duckdb.CatalogException, match=name):
                con.execute(f"SELECT count(*) FROM {name}")
    finally:
        con.close()
