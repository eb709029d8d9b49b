"""The catalog on SQLite and on a real PostgreSQL: migrations, not create_all."""

from __future__ import annotations

import pytest
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from sqlalchemy import inspect, text

import frlake
from frlake.catalog import db
from frlake.catalog.models import Base
from frlake.catalog.revisions import VERSIONS
from frlake.catalog.store import Catalog
from frlake.errors import StaleCatalog
from frlake.ingest import IngestOptions


def _db_url(any_db):
    return any_db.db_url


def test_upgrade_from_base_matches_the_models(any_db):
    engine = db.make_engine(any_db.db_url)
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    engine.dispose()


def test_downgrade_to_base_removes_everything(any_db):
    engine = db.make_engine(any_db.db_url)
    db.upgrade(engine)
    db.downgrade(engine, "base")
    assert set(inspect(engine).get_table_names()) <= {"alembic_version"}
    db.upgrade(engine)
    assert "files" in inspect(engine).get_table_names()
    engine.dispose()


def test_stale_catalog_is_refused_with_the_fixing_command(any_db):
    engine = db.make_engine(any_db.db_url)
    db.upgrade(engine)
    with engine.begin() as conn:
        conn.execute(text("UPDATE alembic_version SET version_num = '0000_older'"))
    with pytest.raises(StaleCatalog) as info:
        Catalog(any_db.db_url)
    assert "frlake --db-url" in str(info.value) and "db upgrade" in str(info.value)
    engine.dispose()


def test_ingest_and_query_on_each_backend(any_db, corpus, views):
    with frlake.Frlake(any_db) as fl:
        summary = fl.ingest([corpus / "job-223715", corpus / "job-f70c5d"], IngestOptions(workers=2))
        assert summary.ingested == 4 + 24 and summary.rejected == 0
        again = fl.ingest([corpus / "job-223715", corpus / "job-f70c5d"])
        assert again.ingested == 0 and again.unchanged == 28
    catalog = Catalog(any_db.db_url)
    attempts = catalog.attempts.info()
    assert [(a.job, a.attempt, a.n_dumps) for a in attempts] == [
        ("job-223715", 0, 4), ("job-f70c5d", 0, 8), ("job-f70c5d", 1, 8), ("job-f70c5d", 2, 8)]
    assert attempts[0].hosts == ("gpu-b03", "gpu-c04")
    assert len(catalog.files.records()) == 28
    catalog.close()
    con = views(any_db.lake, any_db.db_url)
    assert con.execute("SELECT count(*) FROM attempts").fetchone()[0] == 4
    assert con.execute("SELECT sum(n_dumps) FROM attempts").fetchone()[0] == 28
    assert con.execute("SELECT count(*) FROM files WHERE status = 'ingested'").fetchone()[0] == 28


def test_the_head_and_every_downgrades_loss_come_from_the_migrations_themselves():
    """head_revision reads the file names, downgrade_loses each migration's LOSES: Alembic's own view of
    the chain agrees, and no migration leaves out what reverting it throws away."""
    from alembic.script import ScriptDirectory

    script = ScriptDirectory.from_config(db.alembic_config(db.make_engine("sqlite://")))
    assert script.get_current_head() == db.head_revision()
    revisions = [r.revision for r in script.walk_revisions()]
    assert len(revisions) == len(list(VERSIONS.glob("[0-9]*.py")))
    assert all(isinstance(db.downgrade_loses(r), str) and db.downgrade_loses(r) for r in revisions), revisions


def test_a_migration_killed_half_way_leaves_an_empty_catalog(tmp_path):
    """DDL on SQLite is transactional here: a kill during the first migration
    rolls everything back, and the next run creates the catalog."""
    import os
    import signal
    import subprocess
    import sys

    url = f"sqlite:///{tmp_path / 'c.db'}"
    code = (
        "import os, signal\n"
        "from sqlalchemy import event\n"
        "from frlake.catalog import db\n"
        f"engine = db.make_engine({url!r})\n"
        "n = [0]\n"
        "@event.listens_for(engine, 'before_cursor_execute')\n"
        "def kill_on_third_table(conn, cursor, statement, *a):\n"
        "    if statement.lstrip().upper().startswith('CREATE TABLE'):\n"
        "        n[0] += 1\n"
        "        if n[0] == 3:\n"
        "            os.kill(os.getpid(), signal.SIGKILL)\n"
        "db.upgrade(engine)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True)
    assert proc.returncode == -signal.SIGKILL
    engine = db.make_engine(url)
    assert inspect(engine).get_table_names() == []
    catalog = Catalog(url)  # a brand-new database again: created, not refused
    assert db.current_revision(catalog.engine) == db.head_revision()
    catalog.close()
    engine.dispose()
    assert os.path.exists(tmp_path / "c.db")


def _row_counts(engine) -> dict[str, int]:
    names = sorted(set(inspect(engine).get_table_names()) - {"alembic_version"})
    with engine.connect() as conn:
        return {n: conn.execute(text(f"SELECT count(*) FROM {n}")).scalar() for n in names}


@pytest.mark.slow
def test_downgrade_and_upgrade_keep_every_row(any_db, corpus):
    """A real downgrade (batch-altered tables on SQLite) must not cascade into
    the culprit rows through the foreign keys, and an upgrade brings it back."""
    with frlake.Frlake(any_db) as fl:
        fl.ingest([corpus / "job-223715", corpus / "job-5f5228"])
    engine = db.make_engine(any_db.db_url)
    before = _row_counts(engine)
    assert before["culprits"] > 0 and before["rank_stats"] > 0 and before["stack_ids"] > 0
    db.downgrade(engine, "0003")
    after_down = _row_counts(engine)
    assert after_down == {k: v for k, v in before.items()
                          if k not in ("stack_ids", "retired_files", "host_claims", "launcher_failures")
                          and not k.startswith("notify_")}
    db.upgrade(engine)
    assert _row_counts(engine) == {**before, "stack_ids": 0, "retired_files": 0}
    engine.dispose()
    # the stack index is rebuilt from the lake by the next run
    with frlake.Frlake(any_db) as fl:
        assert fl.ingest([corpus / "job-223715"]).unchanged == 4
    engine = db.make_engine(any_db.db_url)
    assert _row_counts(engine)["stack_ids"] == before["stack_ids"]
    engine.dispose()


def test_every_catalog_view_column_has_the_type_of_its_model_column(corpus_lake):
    """The catalog views' Arrow types come from the SQLAlchemy columns: a view
    column is never a string by accident."""
    import pyarrow as pa

    from frlake.query.catalog_views import CATALOG_VIEWS, catalog_table

    catalog = Catalog(corpus_lake.db_url)
    expected = {"job": pa.string(), "attempt": pa.int64(), "rank": pa.int32(), "n_attempts": pa.int64(),
                "started_ns": pa.int64(), "lateness_ms": pa.float64(), "seen_at": pa.timestamp("us", tz="UTC"),
                "position": pa.int32(), "size": pa.int64()}
    for name in CATALOG_VIEWS:
        table = catalog_table(catalog, name)
        assert table.num_rows > 0 or name == "launcher_failures", name  # the corpus has no launcher's log
        for field in table.schema:
            if field.name in expected:
                assert field.type == expected[field.name], (name, field)
    catalog.close()


def test_0005_down_and_up_with_second_identities_and_retired_files(any_db, corpus, tmp_path, views):
    """Downgrading 0005 keeps the first identity of shared bytes (the older
    schema holds one dump per sha256) and every other row; upgrading again
    works on that data, and a later ingest records the second identity again."""
    import shutil

    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715/attempt-0", tree / "job-223715/attempt-0")
    shutil.copytree(corpus / "job-223715/attempt-0", tree / "job-223715/attempt-1")
    with frlake.Frlake(any_db) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=None))
        fl.compact()  # the replaced files are retired, deleted after the grace period
    engine = db.make_engine(any_db.db_url)
    before = _row_counts(engine)
    assert before["dumps"] == 8 and before["retired_files"] > 0
    assert db.reverted_by_downgrade(engine, "0004") == ["0020", "0019", "0018", "0017", "0016", "0015", "0014", "0013", "0012", "0011", "0010", "0009", "0008", "0007", "0006",
                                                        "0005"]
    db.downgrade(engine, "0004")
    after = _row_counts(engine)
    assert after["dumps"] == 4 and "retired_files" not in after
    assert {k: v for k, v in after.items() if k != "dumps"} == {
        k: v for k, v in before.items()
        if k not in ("dumps", "retired_files", "host_claims", "launcher_failures") and not k.startswith("notify_")}
    db.upgrade(engine)
    assert db.current_revision(engine) == db.head_revision()
    with engine.connect() as conn:
        diff = compare_metadata(MigrationContext.configure(conn, opts={"compare_type": True}), Base.metadata)
    assert diff == []
    engine.dispose()
    catalog = Catalog(any_db.db_url)
    assert len(catalog.dumps.known([f.sha256 for f in catalog.files.records()])) == 4
    catalog.close()
    # the lake reads as before: the files are read at their final names (the Parquet rows of the second
    # identity stay; the catalog no longer counts them, which is what the downgrade warned about)
    con = views(any_db.lake, any_db.db_url)
    assert con.execute("SELECT count(*) FROM dumps").fetchone()[0] == 8


@pytest.mark.slow
def test_0007_finds_the_due_diagnoses_without_reading_every_attempt(tmp_path, corpus, any_db):
    """attempts.diagnosis_due is filled from the incidents on upgrade, set by a commit that adds dumps and
    cleared by the diagnosis stored at that revision; the pending query reads its index."""
    import shutil

    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715/attempt-0", tree / "job-223715/attempt-0")
    shutil.copytree(corpus / "job-5f5228", tree / "job-5f5228")
    with frlake.Frlake(any_db) as fl:
        fl.ingest([tree])
    engine = db.make_engine(any_db.db_url)
    db.downgrade(engine, "0006")
    with engine.begin() as conn:  # at 0006, job-5f5228 as an interrupted run left it: committed, not diagnosed
        mine = ("SELECT i.id FROM incidents i JOIN attempts a ON a.id = i.attempt_id JOIN jobs j ON j.id = a.job_id "
                "WHERE j.name = 'job-5f5228'")
        for table in ("culprits", "rank_stats"):
            conn.execute(text(f"DELETE FROM {table} WHERE incident_id IN ({mine})"))
        conn.execute(text(f"DELETE FROM incidents WHERE id IN ({mine})"))
    db.upgrade(engine, "0007")
    with engine.connect() as conn:
        due = conn.execute(text("SELECT j.name, a.number FROM attempts a JOIN jobs j ON j.id = a.job_id "
                                "WHERE a.diagnosis_due ORDER BY 1, 2")).all()
    assert due and {job for job, _ in due} == {"job-5f5228"}
    db.upgrade(engine)  # 0008 marks every attempt due: each gets its summary tables (tests/test_slow_links.py)
    catalog = Catalog(any_db.db_url)
    due = catalog.diagnoses.pending()
    assert len(due) == 4
    with frlake.Frlake(any_db) as fl:
        assert {(d.job, d.attempt) for d in fl.diagnose_pending()} == set(due)
    assert catalog.diagnoses.pending() == []
    shutil.copytree(corpus / "job-223715/attempt-0", tree / "job-223715/attempt-3")
    with frlake.Frlake(any_db) as fl:
        fl.ingest([tree / "job-223715/attempt-3"], IngestOptions(diagnose=False))
    assert catalog.diagnoses.pending() == [("job-223715", 3)]
    with engine.connect() as conn:
        plan = " ".join(str(r) for r in conn.execute(text(
            ("EXPLAIN QUERY PLAN " if engine.dialect.name == "sqlite" else "EXPLAIN ")
            + "SELECT id FROM attempts WHERE diagnosis_due = true")))
    catalog.close()
    engine.dispose()
    assert "ix_attempts_diagnosis_due" in plan or "Seq Scan" in plan  # PostgreSQL may scan a tiny table


@pytest.mark.slow
def test_the_jobs_search_is_one_query_on_each_backend(any_db, corpus):
    """q: a part of a job's or a host's name in any case, or a verdict; the facets count what it finds."""
    from frlake.session import Frlake

    with Frlake(any_db) as fl:
        fl.ingest([corpus / "job-223715", corpus / "job-f70c5d", corpus / "job-e211c0"], IngestOptions(workers=2))
    with Frlake(any_db, must_exist=True) as fl:
        def found(**filters):
            total, rows = fl.list_attempts(limit=None, **filters)
            assert total == len(rows)
            return [(a.job, a.attempt) for a in rows]

        assert found(q="F70C5D") == [("job-f70c5d", 2), ("job-f70c5d", 1), ("job-f70c5d", 0)]
        assert set(found(q="C04")) == {("job-223715", 0)}  # a host's name
        assert set(found(q="hang")) == {("job-223715", 0), ("job-f70c5d", 0), ("job-e211c0", 0)}
        assert found(q="hang", job="job-e211c0") == [("job-e211c0", 0)]
        assert found(q="_") == found(q="%") == []  # LIKE's wildcards are plain characters
        assert fl.attempt_facets(q="f70c5d").verdict == (("hang", 1), ("mismatch", 1), ("straggler", 1))


def test_quick_reads_give_what_the_catalog_gives(corpus_lake):
    """catalog.quick (sqlite3, no SQLAlchemy) and the stores answer alike: every job's attempts, newest
    first with their root causes, and every attempt's stored diagnosis."""
    from frlake.catalog.quick import QuickReads
    from frlake.catalog.revisions import head_revision

    catalog = Catalog(corpus_lake.db_url)
    quick = QuickReads.open(corpus_lake.db_url, head_revision())
    try:
        jobs = sorted({job for job, _ in catalog.attempts.keys()})
        assert len(jobs) > 3
        for job in jobs:
            total, rows = catalog.attempts.page(job=job, limit=50)
            assert (quick.count_attempts(job), quick.attempts_of(job, 50)) == (total, rows)
            assert quick.attempts_of(job, 1) == rows[:1]
            assert quick.latest_attempt(job) == max(a.attempt for a in rows)
            for a in rows:
                assert quick.current_diagnosis(job, a.attempt) == catalog.diagnoses.get(job, a.attempt)
        assert quick.latest_attempt("no-such-job") is None and quick.attempts_of("no-such-job", 5) == []
    finally:
        quick.close()
        catalog.close()


def test_quick_reads_answer_only_when_certain(tmp_path, corpus):
    """A diagnosis that is due, a catalog at another revision, another database: no quick answer, and
    the session's full path gives the right one."""
    from frlake.catalog.quick import QuickReads
    from frlake.catalog.revisions import head_revision

    settings = frlake.Settings.resolve(tmp_path / "lake")
    with frlake.Frlake(settings) as fl:
        fl.ingest([corpus / "job-223715"])
    assert QuickReads.open(settings.db_url, "0001") is None  # not this frlake's revision
    assert QuickReads.open("postgresql+psycopg://u@h/db", head_revision()) is None
    assert QuickReads.open(f"sqlite:///{tmp_path / 'none.db'}", head_revision()) is None
    catalog = Catalog(settings.db_url)
    with catalog.session(write=True) as s:
        s.execute(text("UPDATE attempts SET diagnosis_due = 1"))
    catalog.close()
    quick = QuickReads.open(settings.db_url, head_revision())
    assert quick.current_diagnosis("job-223715", 0) is None  # due: computed again by the full path
    quick.close()
    with frlake.Frlake(settings) as fl:
        assert fl.diagnose("job-223715", reuse=True).verdict == "hang"
    quick = QuickReads.open(settings.db_url, head_revision())
    assert quick.current_diagnosis("job-223715", 0).verdict == "hang"  # stored again, current
    quick.close()
    with frlake.Frlake(settings) as fl:  # an SQLite error in a quick read: the full path answers
        fl._quick_reads().close()
        assert fl.diagnose("job-223715", reuse=True).verdict == "hang"
        assert fl.list_attempts(job="job-223715", limit=5)[0] == 1


def test_an_attempts_files_are_read_through_the_index_by_partition(tmp_path):
    """Reading the records of some attempts' files (``LakeFiles.committed_in``, ``table_files``) gives those
    attempts' files exactly, and SQLite answers each statement through the index by partition (migration
    0016), never by reading every visible file's record: a cost of every diagnosis that grew with the lake."""
    from sqlalchemy import event

    from frlake.storage.files import LakeFiles
    from tests.helpers import CORPUS

    with frlake.Frlake(frlake.Settings.resolve(tmp_path / "lake")) as fl:
        fl.ingest([CORPUS], IngestOptions(workers=1, diagnose=False))
        keys = set(fl.attempt_keys())
        # two attempts of two jobs whose numbers cross: the jobs and numbers asked for hold another attempt
        asked = next([a, b] for a in sorted(keys) for b in sorted(keys)
                     if a[0] != b[0] and a[1] != b[1] and ((a[0], b[1]) in keys or (b[0], a[1]) in keys))
        files = LakeFiles(fl.catalog)
        statements: list[tuple[str, tuple]] = []

        def seen(conn, cursor, statement, parameters, context, executemany):
            if "lake_files" in statement:
                statements.append((statement, parameters))

        event.listen(fl.catalog.engine, "before_cursor_execute", seen)
        try:
            got = files.committed_in(asked, unpartitioned=True)
            one = files.table_files(asked[0])
            counts = files.partition_file_counts(asked, min_files=1)
        finally:
            event.remove(fl.catalog.engine, "before_cursor_execute", seen)
        every = files.committed()
        assert got == [f for f in every if (f.job, f.attempt) in asked or f.job is None]
        assert {f.job for f in got} == {job for job, _ in asked} | {None}
        expected: dict[str, list[str]] = {}
        for f in every:  # by id
            if (f.job, f.attempt) == asked[0] or f.job is None:
                expected.setdefault(f.table, []).append(f.readable)
        assert one == expected
        assert {(job, attempt) for _, job, attempt, _ in counts} == set(asked)
        assert len(statements) >= 4
        with fl.catalog.engine.connect() as conn:
            for statement, parameters in statements:
                plan = " ".join(row[-1] for row in conn.exec_driver_sql("EXPLAIN QUERY PLAN " + statement,
                                                                        parameters).fetchall())
                assert "ix_lake_files_partition" in plan and "SCAN lake_files" not in plan, (statement, plan)
