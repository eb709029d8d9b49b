"""What the `frlake` command prints: tables that fit an 80-column terminal
(DuckDB's duckbox habits), CSV / JSON / NDJSON that scripts can read, errors
in one line. Through typer's CliRunner with COLUMNS set, and through a real
pipe (a subprocess), as a user's shell runs it."""

from __future__ import annotations

import csv
import io
import json
import os
import re
import socket
import subprocess
import sys

import pytest
from rich.cells import cell_len
from typer.testing import CliRunner

import frlake
from frlake.cli.main import app
from frlake.session import Frlake
from tests.helpers import FIXTURES, ROOT

runner = CliRunner()


def run(lake, *args, columns=80):
    result = runner.invoke(app, ["--lake", str(lake.lake), *args], env={"COLUMNS": str(columns)})
    return result


def lines_fit(text: str, width: int = 80) -> None:
    for line in text.splitlines():
        assert cell_len(line) <= width, f"{cell_len(line)} cells: {line!r}"


@pytest.fixture(scope="module")
def counts(corpus_lake):
    with Frlake(corpus_lake, must_exist=True) as session:
        con = session.connect()
        entries = con.execute("SELECT count(*) FROM entries").fetchone()[0]
        described = con.execute("SELECT * FROM entries LIMIT 0").description
        files = con.execute("SELECT count(*) FROM files").fetchone()[0]
    return {"entries": entries, "entry_columns": len(described), "entry_last_column": described[-1][0],
            "files": files}


def test_select_star_from_entries_fits_80_columns(corpus_lake, counts):
    result = run(corpus_lake, "query", "SELECT * FROM entries ORDER BY job, attempt, rank, entry_index")
    assert result.exit_code == 0, result.output
    out = result.stdout
    lines_fit(out)
    assert len(out.splitlines()) < 60  # was 2,300 lines of empty boxes
    body = [line for line in out.splitlines() if line.startswith("│")]
    assert len(body) == 2 + 40 + 1  # the header and its types, the first and last 20 rows, the ⋮ line
    assert "⋮" in out
    said = re.search(r"(\d+) columns \((\d+) shown at 80 columns\)", " ".join(out.split()))
    shown = body[0].count("│") - 1
    assert said.groups() == (str(counts["entry_columns"]), str(shown))
    header = [c.strip() for c in body[0].strip("│").split("│")]
    assert header[:4] == ["job", "attempt", "rank", "host"]  # whose rows they are, first
    assert counts["entry_last_column"].startswith(header[-1].rstrip("…"))  # the last column keeps its place
    assert body[1].split("│")[1].strip() == "varchar"  # the types, as the DuckDB shell shows them
    assert f"{counts['entries']:,} rows (40 shown" in out


def test_files_is_one_line_per_file_at_80_columns(corpus_lake, counts):
    result = run(corpus_lake, "files")
    assert result.exit_code == 0, result.output
    lines_fit(result.stdout)
    rows = [line for line in result.stdout.splitlines() if line.startswith("│")]
    assert len(rows) == counts["files"] + 1  # one line per file, was 15-45
    assert "…" in rows[1]  # the long path is cut, not wrapped
    assert rows[1].split("│")[1].strip().endswith("rank_0") or "rank_" in rows[1]  # a path keeps its end


def test_report_hangs_names_what_it_leaves_out(corpus_lake):
    result = run(corpus_lake, "report", "hangs")
    assert result.exit_code == 0, result.output
    lines_fit(result.stdout)
    assert "signature" in result.stdout  # shown or named as left out, never dropped silently
    wide = run(corpus_lake, "report", "hangs", columns=400)
    header = next(line for line in wide.stdout.splitlines() if line.startswith("│"))
    assert "signature" in header and "left out" not in wide.stdout


def test_diagnose_names_the_ranks_that_wait_and_their_hosts(corpus_lake):
    result = run(corpus_lake, "diagnose", "job-f70c5d", "--attempt", "0")
    assert result.exit_code == 0, result.output
    lines_fit(result.stdout)
    d = frlake.Frlake.open(corpus_lake.lake, corpus_lake.db_url)
    diag = d.diagnose("job-f70c5d", 0, store=False)
    d.close()
    waiting = " ".join(result.stdout.split())
    for w in diag.root.waited_by:
        assert f"{w['rank']} on {w['host']}" in waiting or f", {w['rank']}" in waiting
    assert "Also involved" in result.stdout and "victim: waits for rank" in waiting


def test_names_that_look_like_markup_are_printed_as_they_are(tmp_path):
    """Job names, hosts and paths are the user's text: rich must not read "[bold]" in them as a style, nor
    stop at a "[/]" that closes nothing."""
    job, host = "[bold]j[/]x", "gpu[/]"
    base = ["--lake", str(tmp_path / "lake")]
    ingested = runner.invoke(app, [*base, "ingest", str(ROOT / "samples" / "fr" / "job-223715"), "--job", job,
                                   "--host", host], env={"COLUMNS": "200"})
    assert ingested.exit_code == 0, ingested.output
    assert f"│ {job} │" in ingested.output and f"on {host}" in ingested.output
    shown = runner.invoke(app, [*base, "diagnose", job], env={"COLUMNS": "200"})
    assert shown.exit_code == 0, shown.output
    assert f"{job} attempt 0" in shown.output and f"Root cause: rank 1 on {host} (missing)" in shown.output
    missing = runner.invoke(app, [*base, "diagnose", "[red]nope[/]"], env={"COLUMNS": "200"})
    assert missing.exit_code == 1 and "[red]nope[/]" in missing.output


def test_diagnose_shows_each_roots_evidence_once_and_labels_the_weaker_kind(tmp_path, corpus_lake):
    """A straggler's count of late arrivals is printed; a pending-tail culprit's weaker evidence is labelled
    once (its detail carried the label too)."""
    straggler = run(corpus_lake, "diagnose", "job-65a07f", "--attempt", "0")
    assert straggler.exit_code == 0, straggler.output
    assert re.search(r"first to arrive late in \d+ of \d+ unexplained late arrivals", " ".join(straggler.output.split()))
    lake = tmp_path / "lake"
    runner.invoke(app, ["--lake", str(lake), "ingest", str(FIXTURES / "producers" / "pending_tail"), "-q"])
    tail = runner.invoke(app, ["--lake", str(lake), "diagnose", "job-tail", "--attempt", "0"], env={"COLUMNS": "80"})
    assert tail.exit_code == 0, tail.output
    lines_fit(tail.output)
    assert tail.output.count("weaker evidence (pending tail)") == 1 and "never enqueued seq 8" in " ".join(
        tail.output.split())


def test_waiting_ranks_read_as_runs_per_host_at_any_scale():
    """16,383 waiters on 2,048 hosts (the first 64 named) read as a few runs, not 64 numbers."""
    from frlake.diagnose.words import ranks_on_hosts, waiting_text

    culprit = {"waiters": 16383, "waited_by": [{"rank": r, "host": f"node-{r // 8:04d}"} for r in range(64)]}
    assert waiting_text(culprit) == ("ranks 0-7 on node-0000; ranks 8-15 on node-0001; ranks 16-23 on node-0002; "
                                     "ranks 24-31 on node-0003; ranks 32-39 on node-0004; ranks 40-47 on node-0005 "
                                     "... (16383 in all, with those who wait for them)")
    assert ranks_on_hosts([{"rank": r, "host": "a"} for r in (9, 0, 1, 3, 4, 5)] + [{"rank": 2, "host": None}]) == (
        "ranks 0, 1, 3-5, 9 on a; rank 2 on an unknown host")


def test_csv_has_lf_line_ends_json_for_nested_values_and_a_header_without_rows(corpus_lake):
    out = run(corpus_lake, "query", "SELECT [1, 2] AS xs, {'a': 1} AS s, 'x,y' AS t", "-f", "csv").stdout_bytes
    assert b"\r" not in out
    rows = list(csv.reader(io.StringIO(out.decode())))
    assert rows[0] == ["xs", "s", "t"]
    assert json.loads(rows[1][0]) == [1, 2] and json.loads(rows[1][1]) == {"a": 1} and rows[1][2] == "x,y"
    empty = run(corpus_lake, "query", "SELECT job, attempt FROM attempts WHERE false", "-f", "csv").stdout
    assert empty == "job,attempt\n"
    report = run(corpus_lake, "report", "hangs", "--since", "2100-01-01", "-f", "csv").stdout
    assert report.splitlines()[0].startswith("signature,top_frame") and len(report.splitlines()) == 1
    rows = list(csv.DictReader(io.StringIO(run(corpus_lake, "report", "hangs", "-f", "csv").stdout)))
    assert isinstance(json.loads(rows[0]["evidence"]), list)  # JSON, not a Python repr


def test_ndjson_everywhere_there_is_a_format(corpus_lake, counts):
    out = run(corpus_lake, "query", "SELECT * FROM entries", "-f", "ndjson", "--max-rows", "0").stdout
    records = [json.loads(line) for line in out.splitlines()]
    assert len(records) == counts["entries"]  # --max-rows 0: no row limit
    for args in (["files"], ["report", "hangs"], ["rediagnose", "--job", "job-223715"],
                 ["diagnose", "job-223715"]):
        result = run(corpus_lake, *args, "-f", "ndjson")
        assert result.exit_code == 0, (args, result.output)
        assert all(isinstance(json.loads(line), dict) for line in result.stdout.splitlines()), args
    limited = run(corpus_lake, "query", "SELECT * FROM entries", "-f", "ndjson", "--max-rows", "7")
    assert len(limited.stdout.splitlines()) == 7


def test_sql_errors_keep_duckdbs_hints(corpus_lake):
    result = run(corpus_lake, "query", "SELECT * FROM dump")
    assert result.exit_code == 1
    assert 'Did you mean "dumps"' in result.output
    result = run(corpus_lake, "query", "SELECT rnk FROM dumps")
    assert "Candidate bindings" in result.output and '"rank"' in result.output


def test_version_serve_and_rediagnose_errors(tmp_path, corpus_lake):
    from frlake.ingest.native import speedups

    version = runner.invoke(app, ["--version"])
    assert version.exit_code == 0 and version.stdout.startswith("frlake ")
    assert ("(compiled parser)" in version.stdout) == (speedups is not None)
    bad_port = run(corpus_lake, "serve", "--port", "70000")
    assert bad_port.exit_code == 2 and "65535" in bad_port.output
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = run(corpus_lake, "serve", "--port", str(taken.getsockname()[1]))
    assert busy.exit_code == 1
    assert "address in use" in busy.output and "Traceback" not in busy.output
    assert len(busy.stderr.strip().splitlines()) == 1
    nope = run(corpus_lake, "rediagnose", "--job", "NOPE")
    assert nope.exit_code == 1 and "no dumps of job 'NOPE'" in nope.output


def test_ingest_csv_prints_csv(tmp_path, corpus):
    result = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "ingest", str(corpus / "job-223715"),
                                 "-f", "csv", "--workers", "1"])
    assert result.exit_code == 0, result.output
    rows = list(csv.DictReader(io.StringIO(result.stdout)))
    assert len(rows) == 1 and rows[0]["ingested"] == "4" and rows[0]["rejected"] == "0"
    assert json.loads(rows[0]["diagnosed"]) == [{"job": "job-223715", "attempt": 0, "verdict": "hang"}]


def test_through_a_pipe(corpus_lake):
    """A real pipe: no terminal, no COLUMNS: 80 columns, no colour codes, the same rows."""
    env = {k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES", "FORCE_COLOR")}
    base = [sys.executable, "-m", "frlake.cli.main", "--lake", str(corpus_lake.lake)]
    table = subprocess.run(base + ["query", "SELECT job, attempt, verdict, summary FROM incidents ORDER BY ALL"],
                           capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    assert table.returncode == 0, table.stderr
    assert "\x1b[" not in table.stdout
    lines_fit(table.stdout)
    assert sum(line.startswith("│ job-") for line in table.stdout.splitlines()) == 30
    as_csv = subprocess.run(base + ["query", "SELECT job, attempt FROM incidents ORDER BY ALL", "-f", "csv"],
                            capture_output=True, env=env, cwd=ROOT, timeout=120)
    assert b"\r\n" not in as_csv.stdout and as_csv.stdout.count(b"\n") == 31


def test_ingest_lists_the_attempts_it_diagnosed_with_their_root_causes(tmp_path):
    """After the counts, the verdicts counted, then each attempt with a fault: verdict and root cause, in a
    table of 80 columns (the healthy ones are counted, not listed)."""
    result = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "ingest", str(ROOT / "samples" / "fr")],
                           env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines_fit(result.output)
    first, phases, counts, listed = result.output.splitlines()[:4]
    assert first.startswith("ingested 32 dumps (445 entries) in ") and counts.strip() == (
        "already present 0, unchanged 0, rejected 0")
    assert phases.strip().startswith("scanning ") and ", diagnosing " in phases  # the whole run, phase by phase
    assert listed.startswith("diagnosed 5 attempts: ") and "1 healthy" in listed, listed
    rows = {tuple(c.strip() for c in line.strip("│").split("│")) for line in result.output.splitlines()
            if line.startswith("│ job-")}
    assert ("job-223715", "0", "hang", "rank 1 on gpu-b03") in rows  # tests/test_diagnose.py checks the truth
    assert not any(r[0] == "job-e79e4a" for r in rows) and len(rows) == 4
    again = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "ingest", str(ROOT / "samples" / "fr")])
    assert "diagnosed" not in again.output  # nothing new, nothing diagnosed


@pytest.mark.parametrize("group", [[], ["db"], ["hosts"]])
def test_the_list_of_commands_gives_each_one_line_at_80_columns(group):
    """The first screen a new user reads: each command and its summary on one line, none cut."""
    result = runner.invoke(app, [*group, "--help"], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines_fit(result.output)
    panel = result.output.split("Commands:")[1].splitlines()[1:]
    rows = [line.strip() for line in panel if line.strip()]
    names = [row.split()[0] for row in rows]
    expected = ({"db": ["upgrade", "downgrade", "current"], "hosts": ["attach", "detach", "list"]}[group[0]] if group else
                ["ingest", "query", "files", "jobs", "diagnose", "rediagnose", "entries", "report", "forget", "compact",
                 "trace", "serve", "db", "hosts"])
    assert names == expected, rows  # a summary that wrapped would start a row of its own
    assert all(len(row.split(maxsplit=1)) == 2 for row in rows), rows


def _every_command(group=None, path=()):
    import typer.main

    group = group or typer.main.get_command(app)
    for name, command in group.commands.items():
        yield (*path, name)
        if hasattr(command, "commands"):
            yield from _every_command(command, (*path, name))


@pytest.mark.parametrize("columns", ["80", "200"])
def test_every_help_wraps_at_the_terminal_and_keeps_each_default_whole(columns):
    """Help is click's: at 80 columns no line is longer, no word is cut (the default layout, which a new
    user needs, reads whole), and each option's default and environment variable are said."""
    for command in _every_command():
        result = runner.invoke(app, [*command, "--help"], env={"COLUMNS": columns})
        assert result.exit_code == 0, (command, result.output)
        assert max(map(len, result.output.splitlines())) <= int(columns), (command, result.output)
        assert "…" not in result.output, (command, result.output)
        if command == ("ingest",):
            assert "{job}/attempt-{attempt}/{host}/rank_{rank}" in result.output, result.output
        if command == ("query",):
            assert "[env var: FRLAKE_LAKE]" in " ".join(result.output.split()), result.output


def test_the_command_loads_its_heavy_modules_only_when_a_command_needs_them():
    """``frlake --help`` (and every command's parsing) loads neither DuckDB, pyarrow nor SQLAlchemy."""
    code = ("import sys, frlake.cli.main; "
            "print(sorted(m for m in ('duckdb', 'pyarrow', 'sqlalchemy') if m in sys.modules))")
    loaded = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, timeout=60)
    assert loaded.returncode == 0 and loaded.stdout.strip() == "[]", loaded.stdout + loaded.stderr


def test_the_frlake_entry_point_gives_the_same_answers(corpus_lake):
    """``python -m frlake`` (the console script's entry, frlake.cli.launcher) and the app itself agree, and its
    garbage collector is back on for the command's work."""
    base = ["--lake", str(corpus_lake.lake)]
    via_entry = subprocess.run([sys.executable, "-m", "frlake", *base, "diagnose", "job-223715", "-f", "json",
                                "--fresh"], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert via_entry.returncode == 0, via_entry.stderr
    direct = runner.invoke(app, [*base, "diagnose", "job-223715", "-f", "json", "--fresh"])
    a, b = json.loads(via_entry.stdout), json.loads(direct.output)
    a.pop("seconds"), b.pop("seconds")
    assert a == b
    code = ("import gc, sys; sys.argv = ['frlake', '--lake', sys.argv[1], 'files', '-f', 'csv']; "
            "import frlake.cli._common as c; seen = []; real = c._loaded; "
            "c._loaded = lambda: (real(), seen.append(gc.isenabled())); "
            "import frlake.cli.launcher as e\ntry: e.main()\nexcept SystemExit: pass\nprint(seen, file=sys.stderr)")
    run = subprocess.run([sys.executable, "-c", code, str(corpus_lake.lake)], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert run.stderr.strip().endswith("[True]"), run.stderr


@pytest.mark.parametrize("columns", [80, 200])
def test_a_hang_report_says_whose_stack_it_shows_and_folds_torch(corpus_lake, columns):
    """Rank 1 never joined the all_gather (tp 1, seq 4): its FR stack is its last entry's, an all_reduce,
    and the report says so; the user's own frame comes first and torch's and Python's are folded."""
    result = run(corpus_lake, "diagnose", "job-223715", "--attempt", "0", columns=columns)
    assert result.exit_code == 0, result.output
    lines_fit(result.output, columns)
    text = " ".join(result.output.split())
    assert "FR stack of its last entry, all_reduce in default_pg 0, sequence id 3; it never reached the all_gather" \
        in text
    stack = result.output.split("own code first):")[1].splitlines()
    assert "gen_fr_job.py" in stack[1] and "frames of torch and Python" in " ".join(stack[2:4])
    assert "distributed_c10d" not in result.output


@pytest.mark.slow
def test_an_ingest_of_many_attempts_counts_the_verdicts_and_lists_every_fault(tmp_path, corpus):
    """30 attempts: the counts by verdict, then all 15 with a fault (none of the healthy), none hidden."""
    result = runner.invoke(app, ["--lake", str(tmp_path / "lake"), "ingest", str(corpus)], env={"COLUMNS": "80"})
    assert result.exit_code == 0, result.output
    lines_fit(result.output)
    assert "diagnosed 30 attempts: 5 hang, 5 mismatch, 5 straggler, 15 healthy" in result.output
    rows = [line for line in result.output.splitlines() if line.startswith("│ job-")]
    assert len(rows) == 15 and not any("healthy" in r for r in rows)


def test_a_straggler_says_its_p_value_once_and_the_job_its_other_attempts(corpus_lake):
    result = run(corpus_lake, "diagnose", "job-236832", "--attempt", "0")
    assert result.exit_code == 0, result.output
    body = result.output.split("Root cause")[1]  # the summary above says it too, in a sentence
    assert body.count("p = ") == 1, body
    latest = run(corpus_lake, "diagnose", "job-236832")
    assert "Other attempts of job-236832" in latest.output
    assert "attempt 0: straggler: rank 0 on gpu-b03" in latest.output


def test_entries_mark_the_hung_collective_and_explain_their_cells(corpus_lake):
    result = run(corpus_lake, "entries", "job-223715", "--attempt", "0")
    assert result.exit_code == 0, result.output
    lines_fit(result.output)
    hung = [line for line in result.output.splitlines() if "│ HANG" in line]
    assert len(hung) == 1 and "tp 1" in hung[0] and "│   4 │" in hung[0], hung
    text = " ".join(result.output.split())
    assert "do not record whether it started or completed" in text and "in ms after the group's first member" in text


def test_jobs_finds_attempts_by_a_part_of_a_job_or_host_name_or_a_verdict(corpus_lake):
    found = run(corpus_lake, "jobs", "F70C5D", "-f", "json")
    assert found.exit_code == 0, found.output
    rows = json.loads(found.stdout)
    assert [(r["job"], r["attempt"]) for r in rows] == [("job-f70c5d", 2), ("job-f70c5d", 1), ("job-f70c5d", 0)]
    assert list(rows[0]) == ["job", "attempt", "verdict", "root_cause", "hosts", "started"]
    assert rows[2]["root_cause"] == "rank 5 on gpu-b03 (missing)" and "gpu-b03" in rows[2]["hosts"]
    hangs = json.loads(run(corpus_lake, "jobs", "hang", "-f", "json").stdout)
    assert hangs and {r["verdict"] for r in hangs} == {"hang"}
    table = run(corpus_lake, "jobs", "b03", "--limit", "2")
    assert table.exit_code == 0 and table.stdout.count("│ job-") == 2
    lines_fit(table.stdout)
    assert re.search(r"the newest 2 of \d+ matching attempts", table.stderr)
    csv_rows = list(csv.reader(io.StringIO(run(corpus_lake, "jobs", "--verdict", "mismatch", "-f", "csv").stdout)))
    assert csv_rows[0][:3] == ["job", "attempt", "verdict"] and {r[2] for r in csv_rows[1:]} == {"mismatch"}
    nothing = run(corpus_lake, "jobs", "no-such-job")
    assert nothing.exit_code == 0 and "no attempt matches 'no-such-job'" in nothing.stderr
    assert run(corpus_lake, "jobs", "--verdict", "hanged").exit_code == 2
