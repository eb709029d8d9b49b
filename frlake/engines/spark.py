"""The lake in Apache Spark: the same views, the same reports.

``register_views(spark, fl)`` creates, in a SparkSession, one temporary
view per lake table over exactly the Parquet files the catalog has
committed (never a glob of ``tables/``: a file being published, or one that
compaction or deletion replaced, is not read), with the Hive partition
columns ``job`` and ``attempt`` read from the folder names as DuckDB reads
them; the catalog views (``attempts``, ``culprits``, ``rank_stats``, ...)
as DataFrames built from Arrow; and the derived views. ``run_report`` runs
a fleet report of ``frlake.query.reports.REPORTS`` on Spark: its SQL is the
report's own, transpiled (``frlake.engines.transpile``), and its rows are
the same Python values DuckDB's are.

    from frlake import Frlake
    from frlake.engines.spark import local_session, run_report

    with Frlake.open("frlake-lake") as fl:
        spark = local_session()
        rows = run_report(spark, fl, "flaky-hosts")

Needs ``pip install 'frlake[spark]'`` and a Java 17+ runtime (docs/engines.md).
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

import pyarrow as pa

from frlake import schema
from frlake.engines.transpile import referenced_tables, to_spark
from frlake.errors import FrlakeError
from frlake.query.catalog_views import CATALOG_VIEWS, catalog_table
from frlake.query.reports import REPORTS
from frlake.query.views import DERIVED as _ALL_DERIVED
from frlake.query.views import DUCKDB_ONLY, with_timestamps
from frlake.query.window import Window
from frlake.storage.files import LakeFiles
from frlake.storage.lake import TABLES_DIR

# the derived views written in portable SQL (the others: docs/engines.md)
DERIVED = {name: sql for name, sql in _ALL_DERIVED.items() if name not in DUCKDB_ONLY}

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

    from frlake.session import Frlake

_LOCAL_CONF = {  # local mode on one machine
    "spark.ui.enabled": "false",  # no web UI, no port
    "spark.ui.showConsoleProgress": "false",
    "spark.driver.host": "127.0.0.1",  # no network beyond loopback
    "spark.driver.bindAddress": "127.0.0.1",
    "spark.sql.session.timeZone": "UTC",
    "spark.sql.shuffle.partitions": "4",  # the reports' data is small: 200 tasks per shuffle would dominate
    # a plain read of tables/ keeps a job named "007" as text (frlake's own views give Spark the types)
    "spark.sql.sources.partitionColumnTypeInference.enabled": "false",
}


def local_session(cores: int = 2, driver_memory: str = "1g", app_name: str = "frlake",
                  conf: dict[str, str] | None = None) -> SparkSession:
    """A SparkSession in local mode on this machine (``local[cores]``), with
    no UI and no network beyond loopback. Spark's start-up (a JVM) takes
    seconds: hold one session and reuse it."""
    try:
        from pyspark.sql import SparkSession
    except ImportError:
        raise FrlakeError("Spark is not installed: pip install 'frlake[spark]' (and a Java 17+ runtime)") from None
    os.environ.setdefault("SPARK_LOCAL_IP", "127.0.0.1")  # read by the JVM as it starts: no interface lookup
    builder = SparkSession.builder.master(f"local[{int(cores)}]").appName(app_name)
    for key, value in {**_LOCAL_CONF, "spark.driver.memory": driver_memory, **(conf or {})}.items():
        builder = builder.config(key, value)
    session = builder.getOrCreate()
    session.sparkContext.setLogLevel("ERROR")
    return session


def spark_schema(fields: Iterable[pa.Field]):
    """The Spark schema of Arrow fields."""
    from pyspark.sql.pandas.types import from_arrow_schema

    return from_arrow_schema(pa.schema(list(fields)))


def lake_table(spark: SparkSession, fl: Frlake, name: str, root: str | None = None) -> DataFrame:
    """One lake table over its committed files only, partition columns last
    (``job``, ``attempt``). ``root``: where the cluster sees the lake folder
    (a URI such as ``s3a://bucket/lake`` or ``file:///nfs/lake``; default:
    its local path)."""
    if name not in schema.TABLES:
        raise FrlakeError(f"no lake table {name!r}; there are {', '.join(schema.TABLES)}")
    base = (root or str(fl.lake.root)).rstrip("/")
    partitioned = name in schema.PARTITIONED
    fields = list(schema.TABLES[name]) + (schema.PARTITION_FIELDS if partitioned else [])
    # final names: Spark skips hidden ones, even listed by name
    files = [f"{base}/{path}" for path in LakeFiles(fl.catalog).table_files(final=True).get(name, ())]
    if not files:
        return spark.createDataFrame([], spark_schema(fields))
    # The partition columns' types come from this schema, their values from the folder names.
    reader = spark.read.schema(spark_schema(fields))
    if not partitioned:
        return reader.parquet(*files)
    frame = reader.option("basePath", f"{base}/{TABLES_DIR}/{name}").parquet(*files)
    return frame.withColumn("job", utf8_job(frame["job"]))


def utf8_job(column):
    """The job name as it was. Spark turns each %XX of a folder name into one
    character (U+0000-U+00FF), where DuckDB decodes the bytes as UTF-8: a job
    named "é" comes out of Spark as "Ã©". frlake escapes every character but
    a few ASCII ones (``frlake.storage.lake.partition_value``), so re-encoding those
    characters as ISO-8859-1 gives back the UTF-8 bytes exactly."""
    from pyspark.sql import functions as F

    return F.decode(F.encode(column, "ISO-8859-1"), "UTF-8")


def register_views(spark: SparkSession, fl: Frlake, names: Iterable[str] | None = None,
                   root: str | None = None) -> list[str]:
    """Create (or replace) temporary views in ``spark`` with the names and
    columns of frlake's DuckDB views (docs/schema.md): lake tables over
    committed files, catalog views, derived views. ``names``: only these
    (and what they need); default: all. Returns the names registered.

    The views hold the catalog's list of files and rows as they were when
    this ran: call it again to see later ingests."""
    wanted = set(schema.TABLES) | set(CATALOG_VIEWS) | set(DERIVED) if names is None else set(names)
    unknown = wanted - set(schema.TABLES) - set(CATALOG_VIEWS) - set(DERIVED)
    if unknown:
        raise FrlakeError(f"no view named {', '.join(sorted(unknown))}")
    for derived in wanted & set(DERIVED):
        wanted |= referenced_tables(DERIVED[derived])
    done = []
    for name in sorted(wanted - set(DERIVED)):
        if name in schema.TABLES:
            frame = lake_table(spark, fl, name, root)
        else:
            frame = spark.createDataFrame(catalog_table(fl.catalog, name))
        frame.createOrReplaceTempView(f"__frlake_{name}")
        view = with_timestamps(name, f"__frlake_{name}", frame.columns)
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS {to_spark(view)}")
        done.append(name)
    for name in sorted(wanted & set(DERIVED)):
        spark.sql(f"CREATE OR REPLACE TEMP VIEW {name} AS {to_spark(DERIVED[name])}")
        done.append(name)
    return done


def run_report(spark: SparkSession, fl: Frlake, name: str, window: Window | None = None,
               limit: int | None = None, *, register: bool = True, root: str | None = None) -> list[dict]:
    """A fleet report computed by Spark: the rows ``fl.report(name, window,
    limit)`` gives, from the same SQL. ``register=False``: the views are
    already there (``register_views``), use them as they are."""
    if name not in REPORTS:
        raise FrlakeError(f"unknown report {name!r}; choose one of {', '.join(REPORTS)}")
    spec = REPORTS[name]
    if not spec.portable:
        raise FrlakeError(f"the {name} report runs on DuckDB only (frlake.query.reports: portable=False)")
    if register:
        register_views(spark, fl, referenced_tables(spec.sql), root)
    frame = spark.sql(to_spark(spec.statement(limit)), args=spec.params(window or Window()))
    columns = frame.columns
    return spec.rows(columns, (_plain(row, columns) for row in frame.collect()))


def _plain(row, columns: list[str]) -> tuple:
    """A Spark row as the values DuckDB gives: nested rows as dicts."""
    values = row.asDict(recursive=True)
    return tuple(values[c] for c in columns)
