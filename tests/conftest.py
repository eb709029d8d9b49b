from __future__ import annotations

import json
import os
import shutil
import uuid
from pathlib import Path

import pytest
from sqlalchemy import create_engine, text

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
from tests.helpers import CORPUS, TRUTH


@pytest.fixture(autouse=True)
def _no_kept_workers():
    """Each test starts without the ingest workers an earlier one kept (frlake.ingest.pool): tests that
    watch the forkserver's children see only their own."""
    yield
    from frlake.ingest.pool import stop_kept_pools

    stop_kept_pools()


@pytest.fixture(scope="session")
def corpus() -> Path:
    if not CORPUS.is_dir():
        pytest.fail(f"the corpus is missing at {CORPUS}")
    return CORPUS


@pytest.fixture(scope="session")
def truth() -> list[dict]:
    return json.loads(TRUTH.read_text())


@pytest.fixture(scope="session")
def corpus_lake(tmp_path_factory, corpus) -> Settings:
    """The whole visible corpus ingested once into an embedded lake."""
    settings = Settings.resolve(tmp_path_factory.mktemp("corpus-lake"))
    with Frlake(settings) as fl:
        summary = fl.ingest([corpus], IngestOptions(workers=2))
    assert summary.rejected == 0, summary.rejected_files
    return settings


@pytest.fixture
def corpus_fl(corpus_lake) -> Frlake:
    """A session over the shared corpus lake for one test, closed at its end (with its connections)."""
    with Frlake(corpus_lake) as session:
        yield session


@pytest.fixture
def lake(tmp_path) -> Settings:
    return Settings.resolve(tmp_path / "lake")


@pytest.fixture
def fl(lake) -> Frlake:
    """A session over the test's own fresh lake (``lake``: ``tmp_path / "lake"``), closed at the test's end;
    nothing is created until it is first used."""
    with Frlake(lake) as session:
        yield session


@pytest.fixture
def views():
    """``views(lake, db_url=None)``: a DuckDB connection with a lake's views, from a session of that lake
    (``Frlake.connect``) that the test's end closes with its connections."""
    sessions = []

    def connect(lake, db_url=None):
        sessions.append(Frlake.open(lake, db_url, must_exist=True))
        return sessions[-1].connect()

    yield connect
    for session in sessions:
        session.close()


def _pg_url() -> str | None:
    return os.environ.get("FRLAKE_TEST_PG_URL")


@pytest.fixture
def pg_url():
    """A fresh, empty PostgreSQL database for one test (dropped afterwards)."""
    base = _pg_url()
    if not base:
        if os.environ.get("FRLAKE_REQUIRE_PG"):
            pytest.fail("FRLAKE_TEST_PG_URL is not set but FRLAKE_REQUIRE_PG is")
        pytest.skip("no PostgreSQL: set FRLAKE_TEST_PG_URL (see .ci/run)")
    name = f"frlake_test_{uuid.uuid4().hex[:10]}"
    admin = create_engine(base, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    url = base.rsplit("/", 1)[0] + "/" + name
    yield url
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


@pytest.fixture(params=["sqlite", "postgresql"])
def any_db(request, tmp_path):
    """Settings for a fresh lake whose catalog is SQLite or PostgreSQL."""
    if request.param == "sqlite":
        return Settings.resolve(tmp_path / "lake")
    url = request.getfixturevalue("pg_url")
    return Settings.resolve(tmp_path / "lake", url)


@pytest.fixture(scope="session")
def spark():
    """One local SparkSession for the whole test session: local[2], a 1 GB
    driver, no UI, loopback only (frlake.engines.spark.local_session). Fails
    instead of skipping where CI promised Spark (FRLAKE_REQUIRE_SPARK)."""
    def missing(why: str):
        if os.environ.get("FRLAKE_REQUIRE_SPARK"):
            pytest.fail(f"{why}, but FRLAKE_REQUIRE_SPARK is set")
        pytest.skip(f"{why} (see .ci/run)")

    try:
        import pyspark  # noqa: F401
    except ImportError:
        missing("pyspark is not installed: pip install -e '.[test,spark]'")
    if not os.environ.get("JAVA_HOME") and shutil.which("java") is None:
        missing("no Java runtime: apt-get install openjdk-17-jre-headless")
    from frlake.engines.spark import local_session

    session = local_session(cores=2, driver_memory="1g", app_name="frlake-tests")
    yield session
    session.stop()
