"""The same lake on Apache Spark (local[2]): the fleet reports give DuckDB's
rows, the views read exactly the committed files, job names come back as
they were, and a killed ingest leaves nothing under tables/ that a plain
Spark read would take."""

from __future__ import annotations

import math
import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, date, datetime
from decimal import Decimal
from pathlib import Path

import pytest

if os.environ.get("FRLAKE_REQUIRE_SPARK"):
    import pyspark  # noqa: F401  (fail, do not skip, where CI promised Spark)
    import sqlglot  # noqa: F401
else:
    pytest.importorskip("sqlglot")
    pytest.importorskip("pyspark")

from frlake import schema  # noqa: E402
from frlake.config import Settings  # noqa: E402
from frlake.engines.spark import register_views, run_report, spark_schema  # noqa: E402
from frlake.engines.transpile import NotPortable, to_spark  # noqa: E402
from frlake.ingest import IngestOptions  # noqa: E402
from frlake.ingest.identity import IdentityOptions  # noqa: E402
from frlake.query.reports import REPORTS  # noqa: E402
from frlake.query.window import Window  # noqa: E402
from frlake.session import Frlake  # noqa: E402
from frlake.storage.files import LakeFiles  # noqa: E402
from tests.helpers import ROOT, copy_tree  # noqa: E402


def normal(value):
    """Values compared across engines: floats rounded, timestamps as naive
    UTC, maps by key, lists in their order."""
    if isinstance(value, float):
        return None if math.isnan(value) else round(value, 9)
    if isinstance(value, Decimal):
        return round(float(value), 9)
    if isinstance(value, datetime) and value.tzinfo is not None:
        return value.astimezone(UTC).replace(tzinfo=None)
    if isinstance(value, dict):
        return {k: normal(v) for k, v in sorted(value.items())}
    if isinstance(value, list | tuple):
        return [normal(v) for v in value]
    return value


def duckdb_rows(con, sql: str) -> list[dict]:
    table = con.sql(sql).to_arrow_table()
    return [normal(r) for r in table.to_pylist()]


def spark_rows(spark, sql: str) -> list[dict]:
    return [normal(r) for r in spark.sql(sql).toArrow().to_pylist()]  # Arrow: timestamps keep their zone


# -- the SQL, transpiled ----------------------------------------------------------

def test_constructs_that_differ_between_engines_are_refused():
    with pytest.raises(NotPortable, match="any_value"):
        to_spark("SELECT any_value(x) FROM t")
    with pytest.raises(NotPortable, match="ORDER BY"):
        to_spark("SELECT mode(x) FROM t")
    with pytest.raises(NotPortable):
        to_spark("SELECT list(DISTINCT x ORDER BY y) FROM t")
    assert "COLLECT_LIST" in to_spark("SELECT list(x ORDER BY y) FROM t")  # sqlglot alone drops the ORDER BY


@pytest.mark.slow
def test_ordered_lists_mode_and_timestamps_mean_the_same_on_both(spark, corpus_lake):
    """Every rewrite of frlake.engines.transpile, with NULLs and ties, against DuckDB."""
    values = ("(1, 2, 'a'), (1, NULL, 'b'), (1, 2, 'c'), (1, 1, NULL), (1, 3, 'b'), (1, NULL, 'a'),"
              " (2, 5, 'z'), (2, 5, 'y'), (2, NULL, NULL), (2, 4, 'y')")
    data = f"SELECT * FROM (VALUES {values}) AS v(g, k, x)"
    sql = """
        SELECT g, list(x ORDER BY k DESC, x) AS by_k_desc, list(x ORDER BY k NULLS FIRST, x DESC) AS nulls_first,
               list(DISTINCT x ORDER BY x) AS distinct_x, list(x ORDER BY k, x) FILTER (WHERE x <> 'b') AS filtered,
               list(struct_pack(k := k, x := x) ORDER BY x DESC NULLS LAST, k) AS structs,
               mode(x ORDER BY x) AS mode_x, make_timestamp(max(k) * 86400000000 + 123456) AS ts,
               coalesce(list(x ORDER BY x) FILTER (WHERE x = 'none'), []) AS empty, MAP {} AS m
        FROM t GROUP BY g ORDER BY g
    """
    with Frlake(corpus_lake) as fl:
        con = fl.connect(catalog_views=())
        con.execute(f"CREATE TEMP TABLE t AS {data}")
        want = [normal(dict(zip([d[0] for d in con.description], row))) for row in con.execute(sql).fetchall()]
    spark.sql(to_spark(data)).createOrReplaceTempView("t")
    got = [normal(r.asDict(recursive=True)) for r in spark.sql(to_spark(sql)).collect()]
    assert got == want
    assert want[0]["by_k_desc"] == ["b", "a", "c", None, "a", "b"]  # NULL keys last, ties by x
    assert want[1]["mode_x"] == "y" and want[0]["ts"] == datetime(1970, 1, 4, 0, 0, 0, 123456)


# -- the reports ------------------------------------------------------------------

@pytest.mark.slow
# the corpus has no timed collectives in sibling groups: slow-links has a lake of its own (below)
@pytest.mark.parametrize("name", sorted(n for n, r in REPORTS.items() if r.portable and n != "slow-links"))
def test_spark_report_rows_equal_duckdbs_on_the_corpus(spark, corpus_lake, name):
    with Frlake(corpus_lake) as fl:
        for window, limit in ((Window(), None), (Window(since=date(2026, 11, 29)), 3),
                              (Window(until=date(2000, 1, 1)), None)):
            want = fl.report(name, window, limit)
            got = run_report(spark, fl, name, window, limit)
            assert [normal(r) for r in got] == [normal(r) for r in want], (name, window, limit)
        # without normalising: the same Python values (naive UTC timestamps, dicts, lists), in the same order
        rows = run_report(spark, fl, name)
        # enough to compare: the corpus's five hangs are one stall, one row of five attempts
        assert rows == fl.report(name) and sum(len(r.get("evidence") or [r]) for r in rows) >= 5


@pytest.mark.slow
def test_every_view_has_duckdbs_rows(spark, corpus_lake):
    with Frlake(corpus_lake) as fl:
        names = register_views(spark, fl)
        con = fl.connect()
        views = con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal AND view_name NOT LIKE '\\_\\_%' ESCAPE '\\'")
        from frlake.query.views import DUCKDB_ONLY

        assert set(names) == {r[0] for r in views.fetchall()} - DUCKDB_ONLY
        for name in names:
            want = duckdb_rows(con, f"SELECT * FROM {name}")
            got = spark_rows(spark, f"SELECT * FROM {name}")
            assert len(got) == len(want) and sorted(map(repr, got)) == sorted(map(repr, want)), name
            # the corpus has no debug-server or health-check dumps (tests/test_producers.py has them), and no
            # duration_ms (the summary tables: test_spark_finds_the_slow_link_with_duckdbs_rows)
            assert want or name in ("dump_conflicts", "health", "live_stacks", "launcher_failures", *schema.SUMMARY_TABLES), \
                f"the corpus leaves {name} empty"


# -- what Spark reads ---------------------------------------------------------------

ODD_JOBS = {"team/a b": "job-20d6d4", "100%": "job-223715", "__HIVE_DEFAULT_PARTITION__": "job-39cc0d",
            "007": "job-457f71", "é-ü": "job-f2518d", "x=y:z": "job-f940e7"}


@pytest.fixture(scope="module")
def odd_lake(tmp_path_factory, corpus) -> Settings:
    """Six corpus jobs ingested under job names that need escaping in a folder name."""
    settings = Settings.resolve(tmp_path_factory.mktemp("odd-names"))
    with Frlake(settings) as fl:
        for job, source in ODD_JOBS.items():
            summary = fl.ingest([corpus / source], IngestOptions(workers=1, identity=IdentityOptions(job=job)))
            assert summary.ingested == 4 and summary.rejected == 0
    return settings


@pytest.mark.slow
def test_job_names_come_back_as_they_were(spark, odd_lake):
    with Frlake(odd_lake) as fl:
        register_views(spark, fl, ["entries", "dumps"])
        con = fl.connect()
        for table in ("entries", "dumps"):
            sql = f"SELECT job, attempt, count(*) AS n FROM {table} GROUP BY job, attempt ORDER BY job, attempt"
            assert spark_rows(spark, sql) == duckdb_rows(con, sql)
            assert {r["job"] for r in spark_rows(spark, sql)} == set(ODD_JOBS)
        for name in (n for n, r in REPORTS.items() if r.portable):
            assert run_report(spark, fl, name) == fl.report(name)
    # a plain read of the folders decodes every name but the non-ASCII one the same way (docs/engines.md)
    plain = spark.read.schema(spark_schema([*schema.DUMPS, *schema.PARTITION_FIELDS])).parquet(
        str(odd_lake.lake / "tables" / "dumps"))
    assert {r.job for r in plain.select("job").distinct().collect()} == set(ODD_JOBS) - {"é-ü"} | {"Ã©-Ã¼"}


@pytest.mark.slow
def test_views_read_the_committed_files_only(spark, tmp_path, corpus):
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([corpus / "job-20d6d4", corpus / "job-223715"])
        register_views(spark, fl, ["entries"])
        before = spark.sql("SELECT count(*) FROM entries").first()[0]
        # a file the catalog never committed: a publication in progress, or one compaction replaced
        committed = fl.lake.root / LakeFiles(fl.catalog).paths("entries")[0]
        stray = committed.with_name("part-stray.parquet")
        stray.write_bytes(committed.read_bytes())
        register_views(spark, fl, ["entries"])
        assert spark.sql("SELECT count(*) FROM entries").first()[0] == before > 0
        plain = spark.read.parquet(str(fl.lake.tables / "entries"))
        assert plain.count() > before, "a plain directory read does take it: frlake's views are what protects"


def plain_read_files(spark, settings: Settings) -> set[str]:
    """The files a plain Spark read of each table folder takes, relative to the lake (no frlake involved)."""
    seen: set[str] = set()
    root = settings.lake.resolve()
    for name, table_schema in schema.TABLES.items():
        folder = settings.lake / "tables" / name
        if not folder.is_dir():
            continue
        fields = [*table_schema, *(schema.PARTITION_FIELDS if name in schema.PARTITIONED else [])]
        frame = spark.read.schema(spark_schema(fields)).parquet(str(folder))
        for uri in frame.inputFiles():
            seen.add(Path(uri.removeprefix("file:")).resolve().relative_to(root).as_posix())
    return seen


def committed_files(settings: Settings) -> set[str]:
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        return {p for paths in LakeFiles(fl.catalog).table_files(final=True).values() for p in paths}


def _uncommitted_on_disk(settings: Settings, fl: Frlake) -> set[str]:
    """Parquet files a directory reader would take that the catalog has not committed (listed first,
    so a file committed meanwhile is not counted)."""
    tables = settings.lake / "tables"
    on_disk = {p.relative_to(settings.lake).as_posix() for p in tables.rglob("*.parquet")
               if not any(part.startswith((".", "_")) for part in p.relative_to(tables).parts)}
    if not on_disk:
        return set()
    return on_disk - _committed_final_names(fl)


def _committed_final_names(fl: Frlake) -> set[str]:
    """The final names of every file whose rows the catalog committed, including those a crash caught while
    their final names were being linked (status ``publishing``: the next run finishes them)."""
    from sqlalchemy import select

    from frlake.catalog.models import LakeFile
    from frlake.storage.files import VISIBLE

    with fl.catalog.session() as s:
        return set(s.scalars(select(LakeFile.path).where(LakeFile.status.in_(VISIBLE))))


@pytest.mark.slow
def test_a_crash_between_staging_and_commit_leaves_nothing_under_tables_that_spark_would_read(spark, tmp_path,
                                                                                              corpus):
    """kill -9 ingests at random moments. While one runs it is paused at random
    moments; if tables/ then holds a file the catalog has not committed, it is
    killed right there (the worst moment), else at a random deadline. Then a
    plain Spark read of tables/ (no frlake) must take committed files only; and
    after a re-run, exactly the committed files."""
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for trial in range(3):
        rng = random.Random(trial)
        settings = Settings.resolve(tmp_path / f"lake-{trial}")
        source = copy_tree(corpus, tmp_path / f"corpus-{trial}")
        cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "ingest", str(source),
               "--batch-files", "4", "--workers", str(1 + trial % 2), "--quiet"]
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        deadline = time.monotonic() + rng.uniform(1.0, 4.0)
        fl, caught = None, False
        try:
            while proc.poll() is None and time.monotonic() < deadline and not caught:
                time.sleep(rng.uniform(0.0, 0.03))
                if fl is None and Path(settings.db_url.split("///", 1)[-1]).is_file():
                    fl = Frlake.open(settings.lake, settings.db_url, must_exist=True)
                    fl.catalog  # noqa: B018 - opened now, while the writer runs
                if fl is None or not (settings.lake / "tables").is_dir():
                    continue
                try:
                    os.killpg(proc.pid, signal.SIGSTOP)
                except ProcessLookupError:
                    break
                caught = bool(_uncommitted_on_disk(settings, fl))  # if so, it dies paused right here
                if not caught:
                    os.killpg(proc.pid, signal.SIGCONT)
        finally:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            if fl is not None:
                fl.close()
        after_crash = plain_read_files(spark, settings)
        with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
            assert after_crash <= _committed_final_names(fl), f"trial {trial}: Spark reads uncommitted files"
        done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr
        assert plain_read_files(spark, settings) == committed_files(settings)


@pytest.fixture(scope="module")
def slow_link_lake(tmp_path_factory) -> Settings:
    """tests/test_slow_links.py's fleet: h3's links 3x slower, h6's watchdog late."""
    from tests.fleet import slow_link_fleet

    root = tmp_path_factory.mktemp("timed")
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        assert fl.ingest([slow_link_fleet(root / "nfs", datetime(2026, 11, 2, tzinfo=UTC))]).ingested == 48
    return settings


@pytest.mark.slow
def test_spark_finds_the_slow_link_with_duckdbs_rows(spark, slow_link_lake):
    with Frlake(slow_link_lake) as fl:
        for window in (Window(), Window(since=date(2026, 11, 3)), Window(until=date(2026, 11, 2))):
            assert run_report(spark, fl, "slow-links", window) == fl.report("slow-links", window), window
        rows = run_report(spark, fl, "slow-links")
    assert rows[0]["host"] == "h3" and rows[0]["verdict"] == "slow_link" and len(rows) == 8
    assert [r["host"] for r in rows if r["verdict"] == "slow_link"] == ["h3"]


@pytest.mark.slow
def test_spark_reads_entries_files_from_before_the_signatures_with_null_signatures(spark, tmp_path, corpus):
    """A lake with entries files of schema 1 (no signature columns): Spark, given frlake's schema, reads their
    rows with the signatures NULL, as DuckDB's views do."""
    from tests.test_signatures import _as_schema_1

    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([corpus / "job-223715"])
    _as_schema_1(settings)
    with Frlake(settings) as fl:
        register_views(spark, fl, ["entries"])
        row = spark.sql("SELECT count(*), count(input_sizes_sig), count(output_dtypes_sig) FROM entries").first()
        duck = fl.connect().execute("SELECT count(*), count(input_sizes_sig), count(output_dtypes_sig) "
                                    "FROM entries").fetchone()
    assert tuple(row) == tuple(duck) and duck[0] > 0 and duck[1:] == (0, 0)

