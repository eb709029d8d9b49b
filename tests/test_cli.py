"""The `frlake` command, checked through the library rather than its output."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from frlake.catalog import db
from frlake.cli.main import app
from frlake.session import Frlake

runner = CliRunner()


@pytest.mark.slow
def test_ingest_query_files_round_trip(tmp_path, corpus, monkeypatch, views):
    lake = tmp_path / "lake"
    monkeypatch.setenv("FRLAKE_LAKE", str(lake))
    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715", tree / "job-223715")
    (tree / "job-223715/attempt-0/gpu-b03/rank_7").write_bytes(b"\x80\x04garbage")
    result = runner.invoke(app, ["ingest", str(tree), "--format", "json", "--workers", "1"])
    assert result.exit_code == 3, result.output  # some files were rejected
    summary = json.loads(result.stdout)
    assert (summary["ingested"], summary["rejected"]) == (4, 1)
    assert summary["rejected_by_reason"] == {"truncated": 1}
    with Frlake.open(lake, f"sqlite:///{lake / 'catalog.db'}", must_exist=True) as fl:
        assert len(fl.catalog.files.records(status="ingested")) == 4

    out = runner.invoke(app, ["query", "SELECT rank, count(*) AS n FROM entries GROUP BY rank ORDER BY rank", "-f", "json"])
    assert out.exit_code == 0, out.output
    rows = json.loads(out.stdout)
    con = views(lake)
    assert rows == [{"rank": r, "n": n} for r, n in con.execute("SELECT rank, count(*) FROM entries GROUP BY 1 ORDER BY 1").fetchall()]

    csv_out = runner.invoke(app, ["query", "SELECT 1 AS a, 'x' AS b", "--format", "csv"])
    assert csv_out.stdout.splitlines() == ["a,b", "1,x"]

    files = runner.invoke(app, ["files", "--rejected", "-f", "json"])
    rejected = json.loads(files.stdout)
    assert [(r["status"], r["reason"]) for r in rejected] == [("rejected", "truncated")]


def test_global_options_before_or_after_the_command(tmp_path, corpus):
    lake = tmp_path / "lake"
    a = runner.invoke(app, ["--lake", str(lake), "ingest", str(corpus / "job-223715"), "-q"])
    assert a.exit_code == 0, a.output
    b = runner.invoke(app, ["query", "--lake", str(lake), "SELECT count(*) AS n FROM dumps", "-f", "json"])
    assert json.loads(b.stdout) == [{"n": 4}]


def test_refused_sql_exits_with_a_clear_error(tmp_path):
    result = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "query", "COPY (SELECT 1) TO '/tmp/x.csv'"])
    assert result.exit_code == 1
    assert "only SELECT" in result.output


def test_db_commands(tmp_path):
    url = f"sqlite:///{tmp_path / 'c.db'}"
    up = runner.invoke(app, ["--db-url", url, "db", "upgrade"])
    assert up.exit_code == 0 and db.head_revision() in up.stdout
    down = runner.invoke(app, ["--db-url", url, "db", "downgrade", "base"])
    assert down.exit_code == 0 and "base" in down.stdout
    stale = runner.invoke(app, ["--db-url", url, "files"])
    assert stale.exit_code == 1 and "db upgrade" in stale.output


def test_read_commands_never_create_a_lake(tmp_path):
    typo = tmp_path / "typo"
    for args in (["query", "SELECT 1"], ["files"], ["diagnose", "job-1"], ["report", "hangs"], ["rediagnose"]):
        result = runner.invoke(app, ["--lake", str(typo), *args])
        assert result.exit_code == 1, args
        assert "there is no frlake lake at" in result.output, args
    assert not typo.exists()
