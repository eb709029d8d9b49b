"""The `frlake` command, checked through the library rather than its output."""

from __future__ import annotations

import json
import shutil

import pytest
from typer.testing import CliRunner

from frlake.catalog import db
from frlake.cli.main import COMMANDS, app
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


def _commands(group=None, path=()):
    """Every command of ``frlake`` with its path (``db upgrade``) and its required arguments."""
    import typer.main

    group = group or typer.main.get_command(app)
    for name, command in sorted(group.commands.items()):
        if hasattr(command, "commands"):
            yield from _commands(command, (*path, name))
        else:
            yield (*path, name), [p.name for p in command.params if p.required and p.param_type_name == "argument"]


ARGS = {"paths": "EMPTY", "sql": "SELECT 1", "job": "job-223715", "name": "hangs", "revision": "base",
        "path": "hosts.csv", "attach_id": "0123456789abcdef"}
# what a command needs beyond its arguments to do anything (its required options too)
OPTIONS = {("forget",): ["--job", "job-223715"], ("hosts", "attach"): ["--job", "job-223715"]}


@pytest.mark.parametrize("where", ["before", "after"])
@pytest.mark.parametrize(("path", "required"), [c for c in _commands() if c[0] != ("serve",)],
                         ids=[" ".join(c[0]) for c in _commands() if c[0] != ("serve",)])
def test_an_explicit_lake_wins_over_the_environment(tmp_path, corpus_lake, monkeypatch, path, required, where):
    """With FRLAKE_LAKE (and FRLAKE_DB_URL) naming a real lake, ``--lake B --db-url B`` before or after the
    command is the lake the command uses: it reads or makes B and leaves the environment's untouched."""
    env_lake = tmp_path / "env-lake"
    shutil.copytree(corpus_lake.lake, env_lake)
    before = sorted((p.relative_to(env_lake), p.stat().st_mtime_ns) for p in env_lake.rglob("*"))
    monkeypatch.setenv("FRLAKE_LAKE", str(env_lake))
    monkeypatch.setenv("FRLAKE_DB_URL", f"sqlite:///{env_lake / 'catalog.db'}")
    chosen = tmp_path / "chosen"
    (tmp_path / "EMPTY").mkdir()
    (tmp_path / "hosts.csv").write_text("0,gpu-x\n")
    flags = ["--lake", str(chosen), "--db-url", f"sqlite:///{chosen / 'catalog.db'}"]
    args = [str(tmp_path / ARGS[r]) if ARGS[r] in ("EMPTY", "hosts.csv") else ARGS[r] for r in required] + OPTIONS.get(path, [])
    argv = [*flags, *path, *args] if where == "before" else [*path, *args, *flags]
    result = runner.invoke(app, argv)
    assert str(chosen) in result.output or chosen.exists(), result.output
    assert "HANG" not in result.output and "job-223715" not in result.output.replace(f"'{ARGS['job']}'", "")
    assert sorted((p.relative_to(env_lake), p.stat().st_mtime_ns) for p in env_lake.rglob("*")) == before


@pytest.mark.parametrize("where", ["before", "after"])
def test_serve_serves_the_lake_it_is_given(tmp_path, corpus_lake, where):
    import os
    import socket
    import subprocess
    import sys

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = str(s.getsockname()[1])
    env = dict(os.environ, FRLAKE_LAKE=str(corpus_lake.lake))
    chosen = tmp_path / "chosen"
    flags = ["--lake", str(chosen)]
    argv = [*flags, "serve", "--port", port] if where == "before" else ["serve", "--port", port, *flags]
    proc = subprocess.Popen([sys.executable, "-m", "frlake", *argv], stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=env)
    said = ""
    try:
        while "http://" not in said and proc.poll() is None:
            said += proc.stdout.readline()
    finally:
        proc.terminate()
        proc.wait(timeout=30)
    assert str(chosen) in said.replace("\n", ""), said


def test_the_shell_habits_json_output_file_and_sql_from_stdin(tmp_path, corpus_lake):
    """--json is -f json; -o FILE writes what the command prints there (complete, or not at all);
    ``query -`` reads its SQL from standard input."""
    lake = ["--lake", str(corpus_lake.lake)]
    as_json = runner.invoke(app, [*lake, "query", "-", "--json"], input="SELECT 41 + 1 AS answer")
    assert as_json.exit_code == 0, as_json.output
    assert json.loads(as_json.stdout) == [{"answer": 42}]
    out = tmp_path / "hangs.json"
    report = runner.invoke(app, [*lake, "report", "hangs", "--json", "-o", str(out)])
    assert report.exit_code == 0 and report.stdout == "", report.output
    assert isinstance(json.loads(out.read_text()), list) and not list(tmp_path.glob(".*.part"))
    failed = runner.invoke(app, [*lake, "diagnose", "NOPE", "-o", str(tmp_path / "nope.txt")])
    assert failed.exit_code == 1 and not (tmp_path / "nope.txt").exists() and not list(tmp_path.glob(".*"))


@pytest.mark.parametrize(("argv", "status"), [
    (["forget"], 2), (["forget", "--attempt", "0"], 2), (["forget", "--older-than", "ninety days"], 2),
    (["report", "hangs", "--since", "yesterday"], 2), (["report", "hangs", "--explain", "h"], 2),
    (["compact", "--attempt", "0"], 2), (["query", "SELECT 1", "--max-rows", "-1"], 2), (["nope"], 2),
    (["diagnose", "NOPE"], 1), (["report", "hangs", "--since", "7d"], 0), (["report", "hangs", "--until", "2w"], 0),
])
def test_the_exit_status_table(corpus_lake, argv, status):
    """0: done; 1: an error of the lake or of what it holds; 2: the command line's own mistake."""
    result = runner.invoke(app, ["--lake", str(corpus_lake.lake), *argv])
    assert result.exit_code == status, result.output


HEAVY = ("sqlalchemy", "alembic", "duckdb", "pyarrow", "flask", "waitress")

_MODULES_AFTER = """
import sys
from frlake.cli.launcher import main
sys.argv = ["frlake", *sys.argv[1:]]
try:
    main()
except SystemExit:
    pass
print("\\nMODULES", *sorted(sys.modules))
"""


def _modules_after(*args: str) -> set[str]:
    """The modules a run of ``frlake ARGS`` has imported when it ends."""
    import subprocess
    import sys

    out = subprocess.run([sys.executable, "-c", _MODULES_AFTER, *args], capture_output=True, text=True,
                         check=True).stdout
    return set(out.rsplit("\nMODULES ", 1)[1].split())


def test_the_entry_point_and_a_stored_diagnosis_load_no_heavy_module(tmp_path, corpus):
    """Start-up (issue 32): --version and --help load none of SQLAlchemy, Alembic, DuckDB, pyarrow, Flask;
    showing a stored, current diagnosis on the embedded catalog neither (catalog.quick reads it)."""
    lake = tmp_path / "lake"
    assert CliRunner().invoke(app, ["--lake", str(lake), "ingest", str(corpus / "job-5f5228"), "--quiet"]).exit_code == 0
    assert not _modules_after("--version") & set(HEAVY)
    assert not _modules_after("--help") & set(HEAVY)
    assert not _modules_after("--lake", str(lake), "diagnose", "job-5f5228") & set(HEAVY)
    # a diagnosis that must be computed loads what computing needs
    assert {"sqlalchemy", "duckdb"} <= _modules_after("--lake", str(lake), "diagnose", "job-5f5228", "--fresh")
    # a query that reads no view opens no catalog; one that reads a view does
    assert not _modules_after("--lake", str(lake), "query", "select 1") & {"sqlalchemy", "alembic", "flask"}
    assert "sqlalchemy" in _modules_after("--lake", str(lake), "query", "select count(*) from jobs")


def test_a_command_imports_its_own_module_only(tmp_path):
    """The group makes a command when it runs (cli.main.COMMANDS): `query` loads no other command's code."""
    modules = _modules_after("--lake", str(tmp_path / "lake"), "query", "select 1")
    assert "frlake.cli.query" in modules
    assert not {"frlake.cli.ingest", "frlake.cli.serve", "frlake.cli.report", "frlake.cli.diagnose"} & modules
    assert {f"frlake.cli.{m}" for m, *_ in COMMANDS.values()} <= _modules_after("--help")
