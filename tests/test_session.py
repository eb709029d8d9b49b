"""The session object: one catalog engine for everything a command does, the
connections it hands out closed with it, and the README's way of using it."""

from __future__ import annotations

import duckdb
import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

import frlake
from frlake.errors import FrlakeError
from frlake.session import Frlake, NoLake


class _Statements:
    """Every SQL statement any SQLAlchemy engine runs, and which engine ran it."""

    def __init__(self):
        self.engines: set[int] = set()
        self.count = 0

    def __call__(self, conn, cursor, statement, parameters, context, executemany):
        self.engines.add(id(conn.engine))
        self.count += 1

    def __enter__(self):
        event.listen(Engine, "before_cursor_execute", self)
        return self

    def __exit__(self, *exc):
        event.remove(Engine, "before_cursor_execute", self)


@pytest.mark.slow
def test_rediagnosing_the_corpus_opens_one_catalog_engine(corpus_lake):
    with _Statements() as seen, Frlake(corpus_lake) as fl:
        redone = fl.rediagnose()
    assert len(redone) == 30
    assert len(seen.engines) == 1, "one catalog engine for the whole command (was 31)"
    assert seen.count <= 16 * 30, f"{seen.count} catalog statements for 30 attempts (was about 750)"


def test_the_session_closes_the_connections_it_handed_out(corpus_lake):
    fl = Frlake(corpus_lake)
    con = fl.connect()
    assert con.execute("SELECT count(*) FROM dumps").fetchone()[0] == 167
    fl.close()
    with pytest.raises(duckdb.ConnectionException):
        con.execute("SELECT 1")
    with pytest.raises(FrlakeError, match="closed"):
        fl.catalog  # noqa: B018


def test_open_resolves_like_the_cli_and_refuses_a_missing_lake(tmp_path, corpus_lake):
    with pytest.raises(NoLake, match="there is no frlake lake"):
        Frlake.open(tmp_path / "nowhere", must_exist=True)
    assert not (tmp_path / "nowhere").exists()
    with Frlake.open(corpus_lake.lake) as fl:
        assert fl.settings == corpus_lake
        assert fl.diagnose("job-223715", 0, store=False).root.rank == 1


def test_a_read_never_writes(corpus_lake, tmp_path):
    """stored_diagnosis (what a page shows) computes a missing diagnosis without storing it."""
    from tests.helpers import CORPUS

    settings = frlake.Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([CORPUS / "job-223715"], frlake_options(diagnose=False))
        assert fl.catalog.diagnoses.get("job-223715", 0) is None
        assert fl.stored_diagnosis("job-223715", 0).verdict == "hang"
        assert fl.catalog.diagnoses.get("job-223715", 0) is None
        assert fl.catalog.diagnoses.pending() == [("job-223715", 0)]


def frlake_options(**kwargs):
    from frlake.ingest import IngestOptions

    return IngestOptions(**kwargs)


def test_a_no_op_rescan_reads_nothing_in_proportion_to_the_lake(corpus_lake, corpus):
    """Nothing pending: no stored report is read (the complete marks of the pending attempts only), and the
    lake files a crash may have left are found through an index on their status."""
    texts = []

    def seen(conn, cursor, statement, *args):
        texts.append(statement)

    with Frlake(corpus_lake) as fl:
        event.listen(Engine, "before_cursor_execute", seen)
        try:
            summary = fl.ingest([corpus / "job-223715"])
        finally:
            event.remove(Engine, "before_cursor_execute", seen)
    assert summary.unchanged == 4 and summary.diagnosed == []
    assert not [t for t in texts if "incidents.report" in t], "a no-op run read the stored reports"


def test_diagnose_shows_the_current_stored_diagnosis_and_fresh_computes_it_again(tmp_path, corpus):
    """The stored report is altered behind frlake's back: ``frlake diagnose`` shows it (it is current: no
    dump came or went since), ``--fresh`` computes the true one and stores it; a new dump, or another
    algorithm version, makes the stored one stale."""
    import json
    import shutil

    from sqlalchemy import update
    from typer.testing import CliRunner

    from frlake.catalog.models import IncidentRow
    from frlake.cli.main import app
    from frlake.config import Settings
    from frlake.ingest import IngestOptions

    job = "job-223715"  # a hang of 4 ranks: rank 3 left no dump
    tree = tmp_path / "nfs"
    shutil.copytree(corpus / job / "attempt-0", tree / job / "attempt-0")
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        fl.ingest([tree])

    def tamper(**changes) -> None:
        with Frlake(settings) as fl, fl.catalog.session(write=True) as s:
            report = json.loads(s.scalar(IncidentRow.__table__.select().with_only_columns(IncidentRow.report)))
            report.update(changes)
            s.execute(update(IncidentRow).values(report=json.dumps(report)))

    def cli(*args) -> dict:
        result = CliRunner().invoke(app, ["--lake", str(settings.lake), "diagnose", job, "-f", "json", *args])
        assert result.exit_code == 0, result.output
        return json.loads(result.output)

    true = cli()["summary"]
    tamper(summary="altered")
    assert cli()["summary"] == "altered", "the stored diagnosis is current: it is read, not computed"
    assert cli("--fresh")["summary"] == true
    assert cli()["summary"] == true, "--fresh stored what it computed"

    tamper(summary="altered", algorithm_version=1)
    assert cli()["summary"] == true, "made by another algorithm: computed again"

    tamper(summary="altered")
    with Frlake(settings) as fl:
        assert fl.current_diagnosis(job, 0).summary == "altered"
    rank0 = next((tree / job / "attempt-0").rglob("rank_0"))
    shutil.copy(rank0, rank0.with_name("rank_0_1730000000"))  # a second dump of rank 0: a snapshot
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(diagnose=False))
        assert fl.catalog.diagnoses.state(job, 0)[1], "the attempt's dumps changed: its diagnosis is due"
        assert fl.current_diagnosis(job, 0) is None
    assert cli()["summary"] != "altered"


def test_ingest_progress_has_a_total_and_names_each_phase(tmp_path, corpus):
    """The files are counted before they are read, so progress has a total from the start; each phase is
    named, and the summary's time is the whole run's (reading, compacting and diagnosing) with each phase's."""
    import shutil

    from frlake.config import Settings
    from frlake.ingest import IngestOptions

    tree = tmp_path / "nfs"
    for job in ("job-223715", "job-f70c5d"):
        shutil.copytree(corpus / job, tree / job)
    files = sum(1 for p in tree.rglob("*") if p.is_file())
    steps = []
    with Frlake(Settings.resolve(tmp_path / "lake")) as fl:
        summary = fl.ingest([tree], IngestOptions(workers=1, chunk_files=4), steps.append)
    reading = [s for s in steps if s.phase == "reading"]
    assert reading and all(s.total == files for s in reading) and reading[-1].done == files
    assert [s.done for s in reading] == sorted(s.done for s in reading)
    diagnosing = [s for s in steps if s.phase == "diagnosing"]
    assert diagnosing[-1].done == diagnosing[-1].total == len(summary.diagnosed) == 4
    phases = list(dict.fromkeys(s.phase for s in steps))
    assert phases[0] == "reading" and phases[-1] == "diagnosing", phases
    assert list(summary.phases)[:2] == ["scanning", "reading"] and "diagnosing" in summary.phases
    assert summary.seconds >= sum(summary.phases.values()) - 0.01
