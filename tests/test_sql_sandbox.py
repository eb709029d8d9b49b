"""The SQL sandbox against the attacks that got through it, on a real lake.

Each attack runs on its own copy of the ingested corpus (``victim``), so a
regression destroys that copy, not the session's lake."""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from frlake.config import Settings
from frlake.errors import QueryError
from frlake.query.sandbox import QueryLimits
from frlake.query.statements import READING_TABLE_FUNCTIONS, STATE_CHANGING_FUNCTIONS, check_statement
from frlake.server import create_app
from frlake.server.config import ServerConfig
from frlake.session import Frlake
from tests.helpers import copy_tree

# Functions DuckDB marks has_side_effects whose effects stay inside the query:
# randomness, clocks, sleeping (bounded by the time limit), raising an error.
HARMLESS_SIDE_EFFECTS = {
    "random", "uuid", "uuidv4", "uuidv7", "gen_random_uuid", "sleep_ms", "error",
    "current_query", "current_query_id", "current_transaction_id", "txid_current", "get_current_time",
    "get_current_timestamp", "now", "today", "current_date", "current_localtime", "current_localtimestamp",
    "transaction_timestamp", "currval", "getvariable", "current_setting", "current_connection_id",
    "stats", "vector_type",  # describe a value
}


@pytest.fixture
def victim(tmp_path, corpus_lake) -> Settings:
    return Settings.resolve(copy_tree(corpus_lake.lake, tmp_path / "lake"))


@pytest.fixture
def victim_fl(victim) -> Frlake:
    """A session over the test's copy of the corpus lake (each query in a sandbox of its own, as ever)."""
    with Frlake(victim) as fl:
        yield fl


def lake_files(settings: Settings) -> dict[str, str]:
    """Every file under tables/ with its sha256."""
    root = settings.lake / "tables"
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def a_dumps_file(settings: Settings) -> Path:
    return next((settings.lake / "tables" / "dumps").rglob("*.parquet"))


def refused(sql: str, fl: Frlake, limits: QueryLimits = QueryLimits()) -> str:
    with pytest.raises(QueryError) as info:
        fl.query(sql, limits)
    return str(info.value)


def test_explain_analyze_copy_partition_by_overwrite_cannot_delete_the_entries(victim, victim_fl):
    before = lake_files(victim)
    entries = victim_fl.query("SELECT count(*) FROM entries").rows
    sql = (f"EXPLAIN ANALYZE COPY (SELECT 1 AS a, 'x' AS job) TO '{victim.lake}/tables/entries' "
           "(FORMAT parquet, PARTITION_BY (job), OVERWRITE)")
    assert "COPY statement under EXPLAIN" in refused(sql, victim_fl)
    assert lake_files(victim) == before
    assert victim_fl.query("SELECT count(*) FROM entries").rows == entries and entries[0][0] > 0


def test_explain_analyze_copy_cannot_rewrite_a_committed_dumps_file(victim, victim_fl):
    target = a_dumps_file(victim)
    before = lake_files(victim)
    sql = (f"EXPLAIN ANALYZE COPY (SELECT * REPLACE ('evil-host' AS host) FROM read_parquet('{target}')) "
           f"TO '{target}' (FORMAT parquet)")
    assert "COPY" in refused(sql, victim_fl)
    assert lake_files(victim) == before
    assert victim_fl.query("SELECT count(*) FROM dumps WHERE host = 'evil-host'").rows == [(0,)]


def test_explain_analyze_copy_cannot_fill_the_lake(victim, victim_fl):
    sql = f"EXPLAIN ANALYZE COPY (SELECT repeat('x', 1000) FROM range(1000)) TO '{victim.lake}/tables/fill.csv'"
    assert "COPY" in refused(sql, victim_fl)
    assert not (victim.lake / "tables" / "fill.csv").exists()


@pytest.mark.parametrize("sql", [
    "/* a */ EXPLAIN /* b */ ANALYZE -- c\n COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "EXPLAIN (ANALYZE) COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "EXPLAIN (FORMAT json, ANALYZE true) COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "explain analyse copy (select 1) to '{lake}/tables/x.csv'",
    "EXPLAIN ANALYZE VERBOSE COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "EXPLAIN COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "SELECT 1; COPY (SELECT 1) TO '{lake}/tables/x.csv'",
    "EXPLAIN ANALYZE CREATE OR REPLACE VIEW incidents AS SELECT 'job-FAKE' AS job",
    "EXPLAIN ANALYZE CREATE TEMP TABLE t AS SELECT * FROM range(10)",
    "EXPLAIN ANALYZE DROP VIEW entries",
    "EXPLAIN ANALYZE INSERT INTO entries SELECT * FROM entries",
    "EXPLAIN ANALYZE ATTACH ':memory:' AS x",
    "EXPLAIN ANALYZE SET memory_limit = '100GB'",
    "EXPLAIN ANALYZE PRAGMA version",
    "EXPLAIN ANALYZE CREATE MACRO m() AS 1",
    "EXPLAIN ANALYZE SET VARIABLE x = 1",
    "EXPLAIN ANALYZE",
])
def test_explain_never_runs_anything_but_a_query(victim, victim_fl, sql):
    before = lake_files(victim)
    message = refused(sql.format(lake=victim.lake), victim_fl)
    assert "only select" in message.lower() or "exactly one statement" in message or "EXPLAIN of nothing" in message \
        or "does not parse" in message
    assert lake_files(victim) == before


@pytest.mark.parametrize("sql, name", [
    ("SELECT * FROM query('SELECT 1')", "query"),
    ("SELECT * FROM query_table('entries')", "query_table"),
    ("SELECT * FROM json_execute_serialized_sql(json_serialize_sql('SELECT 1'))", "json_execute_serialized_sql"),
    ("WITH x AS (SELECT * FROM query('SELECT 1')) SELECT * FROM x", "query"),
    ("SELECT (SELECT count(*) FROM query('SELECT 1'))", "query"),
    ("SELECT * FROM range(1) r, LATERAL (SELECT * FROM query('SELECT 2'))", "query"),
    ("EXPLAIN ANALYZE SELECT * FROM query('SELECT 1')", "query"),
    ("SELECT * FROM checkpoint()", "checkpoint"),
    ("SELECT * FROM force_checkpoint()", "force_checkpoint"),
    ("SELECT * FROM truncate_duckdb_logs()", "truncate_duckdb_logs"),
    ("SELECT * FROM enable_logging()", "enable_logging"),
    ("SELECT * FROM system.main.query('SELECT 1')", "query"),
    ("SELECT setseed(0.5)", "setseed"),
    ("SELECT nextval('s')", "nextval"),
    ("SELECT write_log('x')", "write_log"),
])
def test_functions_that_run_sql_or_change_state_are_refused(corpus_fl, sql, name):
    assert f"{name}()" in refused(sql, corpus_fl)


def test_every_function_duckdb_marks_as_changing_state_is_refused_or_reviewed():
    con = duckdb.connect()
    flagged = {r[0] for r in con.execute(
        "SELECT DISTINCT function_name FROM duckdb_functions() WHERE has_side_effects AND function_type = 'scalar'"
    ).fetchall()}
    assert flagged, "duckdb_functions() no longer says which functions have side effects"
    assert flagged <= STATE_CHANGING_FUNCTIONS | HARMLESS_SIDE_EFFECTS, flagged - STATE_CHANGING_FUNCTIONS - HARMLESS_SIDE_EFFECTS
    tables = {r[0] for r in con.execute(
        "SELECT function_name FROM duckdb_functions() WHERE function_type IN ('table', 'table_macro')").fetchall()}
    assert READING_TABLE_FUNCTIONS <= tables, READING_TABLE_FUNCTIONS - tables  # no misspelt names


@pytest.mark.parametrize("sql", [
    "SELECT count(*) FROM entries",
    "/* why */ WITH x AS (SELECT job FROM dumps) SELECT count(*) FROM x -- done",
    "EXPLAIN SELECT count(*) FROM entries",
    "EXPLAIN ANALYZE SELECT count(*) FROM entries",
    "/* a */ EXPLAIN /* b */ ANALYZE SELECT 1",
    "EXPLAIN (FORMAT json) SELECT 1",
    "SUMMARIZE SELECT job FROM dumps",
    "DESCRIBE entries",
    "SHOW TABLES",
    "FROM dumps SELECT host LIMIT 1",
    "SELECT * FROM range(3)",
    "SELECT * FROM duckdb_views() WHERE NOT internal",
])
def test_queries_still_run(corpus_fl, sql):
    check_statement(sql)
    assert corpus_fl.query(sql).columns


def test_a_copy_into_the_lake_is_impossible_even_without_the_parser_check(victim, victim_fl):
    before = lake_files(victim)
    target = a_dumps_file(victim)
    attacks = [
        f"COPY (SELECT 1 AS a, 'x' AS job) TO '{victim.lake}/tables/entries' (FORMAT parquet, PARTITION_BY (job), OVERWRITE)",
        f"COPY (SELECT * REPLACE ('evil-host' AS host) FROM dumps) TO '{target}' (FORMAT parquet)",
        f"COPY (SELECT 1) TO '{victim.lake}/tables/fill.csv'",
        f"COPY (SELECT 1) TO '{victim.lake / 'catalog.db'}'",
        "COPY (SELECT 1) TO '.tmp/fill.csv'",  # DuckDB's default temp directory, always writable to SQL
        f"ATTACH '{victim.lake}/tables/x.duckdb' AS x",
    ]
    with victim_fl.sandbox() as sandbox:
        for sql in attacks:
            with pytest.raises(QueryError) as info:
                sandbox.run_unchecked(sql)
            assert "opens no file" in str(info.value), sql
        assert not sandbox.closed
    assert lake_files(victim) == before
    assert not Path(".tmp/fill.csv").exists()


def test_a_view_replaced_without_the_parser_check_closes_the_sandbox(victim_fl):
    with victim_fl.sandbox() as sandbox:
        with pytest.raises(QueryError, match="changed the sandbox's views"):
            sandbox.run_unchecked("CREATE OR REPLACE VIEW incidents AS SELECT 'job-FAKE' AS job")
        assert sandbox.closed
        with pytest.raises(QueryError, match="closed"):
            sandbox.run("SELECT 1")


def test_temp_objects_and_variables_vanish_with_their_query(victim_fl):
    with victim_fl.sandbox() as sandbox:
        for sql in ("CREATE TEMP TABLE t AS SELECT * FROM range(1000)", "CREATE TEMP VIEW entries AS SELECT 1 AS x",
                    "CREATE TEMP MACRO m() AS 1", "SET VARIABLE v = 42"):
            sandbox.run_unchecked(sql)
        with pytest.raises(QueryError, match="t does not exist"):
            sandbox.run("SELECT * FROM t")
        assert sandbox.run("SELECT getvariable('v')").rows == [(None,)]
        assert "time_created_ns" in sandbox.run("SELECT * FROM entries LIMIT 1").columns
        assert not sandbox.closed


def test_the_server_sandbox_carries_nothing_from_one_user_to_the_next(victim):
    client = create_app(ServerConfig(victim)).test_client()
    client.environ_base["HTTP_ORIGIN"] = "http://localhost"  # the server's own SQL page (it has no token)
    real = client.post("/api/query", json={"sql": "SELECT count(*) FROM incidents"}).get_json()["rows"]
    attack = client.post("/api/query", json={
        "sql": "EXPLAIN ANALYZE CREATE OR REPLACE VIEW incidents AS SELECT 'job-FAKE' AS job"})
    assert attack.status_code == 400 and attack.get_json()["error"]["code"] == "query_refused"
    temp = client.post("/api/query", json={"sql": "EXPLAIN ANALYZE CREATE TEMP TABLE big AS SELECT * FROM range(10)"})
    assert temp.get_json()["error"]["code"] == "query_refused"
    from frlake.server import context as server
    with client.application.app_context():
        sandbox = server.sandbox()
        with pytest.raises(QueryError):  # the other layers, as if the check had been bypassed
            sandbox.run_unchecked("CREATE OR REPLACE VIEW incidents AS SELECT 'job-FAKE' AS job")
        sandbox_after = server.sandbox()
        assert sandbox_after is not sandbox and not sandbox_after.closed
        sandbox_after.run_unchecked("CREATE TEMP TABLE big AS SELECT * FROM range(10)")
    after = client.post("/api/query", json={"sql": "SELECT count(*) FROM incidents"}).get_json()
    assert after["rows"] == real
    fake = client.post("/api/query", json={"sql": "SELECT count(*) FROM incidents WHERE job = 'job-FAKE'"})
    assert fake.get_json()["rows"] == [[0]]
    gone = client.post("/api/query", json={"sql": "SELECT * FROM big"})
    assert gone.status_code == 400 and "big" in gone.get_json()["error"]["message"]


def test_the_sandbox_opens_no_file_not_even_the_lakes(corpus_lake, corpus_fl):
    target = a_dumps_file(corpus_lake)
    assert "outside the lake" in refused(f"SELECT count(*) FROM read_parquet('{target}')", corpus_fl)
    assert "outside the lake" in refused(f"SELECT * FROM glob('{corpus_lake.lake}/**')", corpus_fl)


@pytest.mark.slow
def test_sealed_views_read_the_same_rows_as_the_lake_connection(corpus_fl):
    con = corpus_fl.connect()
    for table in ("entries", "dumps", "groups", "pg_status", "stacks", "jobs", "files", "hosts"):
        sql = f"SELECT count(*), count(DISTINCT COLUMNS(*)) FROM {table}"
        assert corpus_fl.query(sql).rows == con.execute(sql).fetchall(), table
        lake_columns = [d[0] for d in con.execute(f"SELECT * FROM {table} LIMIT 0").description]
        assert corpus_fl.query(f"SELECT * FROM {table} LIMIT 0").columns == lake_columns, table
    sql = "SELECT job, attempt, count(*) FROM entries GROUP BY ALL ORDER BY ALL"
    assert corpus_fl.query(sql).rows == con.execute(sql).fetchall()


def test_a_runaway_aggregate_stops_at_the_memory_limit(corpus_fl):
    message = refused("SELECT count(*) FROM (SELECT x, count(*) FROM range(50000000) t(x) GROUP BY x)",
                      corpus_fl, QueryLimits(max_memory=64 << 20))
    assert "over the 64 MiB memory limit" in message


def test_a_runaway_sort_is_held_to_the_memory_limit_in_rss(corpus_lake):
    """In a child process: without the limit this sort would take tens of GiB.
    The peak above what the process held with the sandbox open (Python,
    pyarrow, the views) stays within twice the limit."""
    script = (
        "import resource, sys\n"
        "from frlake.config import Settings\nfrom frlake.errors import QueryError\n"
        "from frlake import Frlake\nfrom frlake.query import QueryLimits\n"
        "peak = lambda: resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024\n"
        "fl = Frlake(Settings.resolve(sys.argv[1]))\n"
        "sandbox = fl.sandbox(QueryLimits(timeout_s=120, max_memory=256 << 20))\n"
        "sandbox.run('SELECT count(*) FROM entries')\n"
        "print(peak())\n"
        "try:\n"
        "    sandbox.run('SELECT a.x * b.x FROM range(100000) a(x), range(100000) b(x) ORDER BY 1 DESC')\n"
        "except QueryError as exc:\n"
        "    print(exc)\n"
        "print(peak())\n"
    )
    out = subprocess.run([sys.executable, "-c", script, str(corpus_lake.lake)], capture_output=True, text=True,
                         timeout=300, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)})
    base_mib, message, peak_mib = out.stdout.strip().splitlines()
    assert "over the 256 MiB memory limit" in message, out.stderr
    assert int(peak_mib) - int(base_mib) < 2 * 256, (base_mib, peak_mib)


def test_the_byte_cap_truncates(corpus_fl):
    result = corpus_fl.query("SELECT i, repeat('x', 1000) AS s FROM range(100000) t(i)",
                             QueryLimits(max_bytes=1 << 20))
    assert result.truncated and 0 < result.bytes <= 1 << 20
    assert 500 < len(result.rows) < 1100 and [r[0] for r in result.rows] == list(range(len(result.rows)))
    whole = corpus_fl.query("SELECT i FROM range(100) t(i)", QueryLimits(max_bytes=1 << 20))
    assert not whole.truncated and len(whole.rows) == 100


def test_row_cap_and_exact_fit_are_not_confused(corpus_fl):
    assert not corpus_fl.query("SELECT * FROM range(10)", QueryLimits(max_rows=10)).truncated
    capped = corpus_fl.query("SELECT * FROM range(11)", QueryLimits(max_rows=10))
    assert capped.truncated and capped.rows == [(i,) for i in range(10)]


def test_query_limits_keep_their_old_shape():
    assert QueryLimits(5.0, 7) == QueryLimits(timeout_s=5.0, max_rows=7)
    with pytest.raises(ValueError):
        QueryLimits(max_memory=0)


def test_the_rows_after_a_cap_start_at_their_offset(corpus_fl):
    """A page of a result cut at the row cap: the rows before the offset stream past, dropped, across
    Arrow batches; the caps count from the offset."""
    sql = "SELECT range AS n FROM range(3000) ORDER BY n"
    with corpus_fl.sandbox(QueryLimits(max_rows=4)) as sandbox:
        page = sandbox.run(sql, offset=1022)  # across the first batch of 1,024 rows
        assert [r[0] for r in page.rows] == [1022, 1023, 1024, 1025] and page.truncated
        last = sandbox.run(sql, offset=2997)
        assert [r[0] for r in last.rows] == [2997, 2998, 2999] and not last.truncated
        assert sandbox.run(sql, offset=5000).rows == []
        assert sandbox.run("SELECT 1 AS one", offset=0).rows == [(1,)]
