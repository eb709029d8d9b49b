"""Correct, forget, retain and compact, on the real corpus (docs/lake.md, "Lifecycle")."""

from __future__ import annotations

import shutil
from datetime import UTC, datetime

import pyarrow.parquet as pq
import pytest
from sqlalchemy import text
from typer.testing import CliRunner

from frlake.catalog.db import head_revision
from frlake.cli.main import app
from frlake.config import Settings
from frlake.ingest import IdentityOptions, IngestOptions
from frlake.session import Frlake
from frlake.storage.compact import CompactOptions
from frlake.storage.files import LakeFiles
from frlake.storage.forget import ForgetOptions
from tests.helpers import assert_lake_is_clean, snapshot, visible_parquet

JOB = "job-f70c5d"  # 3 attempts of 8 ranks each
NOW = ForgetOptions(retire_grace_s=0)
runner = CliRunner()


def _many_files(tmp_path, corpus, jobs=(JOB, "job-223715")) -> tuple[Settings, object]:
    tree = tmp_path / "nfs"
    for job in jobs:
        shutil.copytree(corpus / job, tree / job)
    return tree, Settings.resolve(tmp_path / "lake")


def _cli(settings: Settings, *args: str):
    return runner.invoke(app, ["--lake", str(settings.lake), "--db-url", settings.db_url, *args])


# -- correct ------------------------------------------------------------------
def test_a_rejection_for_identity_is_retried_under_other_options(tmp_path, corpus, views):
    """The issue's repro: 4 rank files whose layout (given, so no flat shape is tried) names no job or
    attempt, then the options that name it."""
    flat = tmp_path / "flat"
    flat.mkdir()
    for src in sorted((corpus / "job-223715/attempt-0").rglob("rank_*")):
        shutil.copy(src, flat / src.name)
    settings = Settings.resolve(tmp_path / "lake")
    layout = "{job}/attempt-{attempt}/{host}/rank_{rank}"
    first = _cli(settings, "ingest", str(flat), "--workers", "1", "--layout", layout)
    assert first.exit_code == 4, first.output
    with Frlake(settings) as fl:
        again = fl.ingest([flat], IngestOptions(identity=IdentityOptions(layout=layout)))
    assert (again.rejected, again.skipped_rejected, again.unchanged) == (0, 4, 0)
    fixed = _cli(settings, "ingest", str(flat), "--job", "j1", "--attempt", "0", "--host", "nodeX", "--workers", "1",
                 "--layout", layout)
    assert fixed.exit_code == 0, fixed.output
    assert "ingested 4 dumps" in fixed.output
    con = views(settings.lake)
    assert con.execute("SELECT DISTINCT job, attempt, host FROM dumps").fetchall() == [("j1", 0, "nodeX")]
    assert sorted(r[0] for r in con.execute("SELECT rank FROM dumps").fetchall()) == [0, 1, 2, 3]


def test_other_rejections_are_skipped_unread_until_retried(tmp_path, corpus):
    tree = tmp_path / "nfs" / "job-x/attempt-0/h"
    tree.mkdir(parents=True)
    (tree / "rank_0").write_bytes((corpus / "job-223715/attempt-0/gpu-b03/rank_0").read_bytes()[:100])
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        assert fl.ingest([tmp_path / "nfs"]).rejected == 1
    result = _cli(settings, "ingest", str(tmp_path / "nfs"), "--workers", "1")
    assert result.exit_code == 0 and "1 files rejected before were skipped unread" in result.output
    assert "--retry-rejected" in result.output
    with Frlake(settings) as fl:
        retried = fl.ingest([tmp_path / "nfs"], IngestOptions(retry_rejected=True))
    assert (retried.rejected, retried.skipped_rejected) == (1, 0)
    # a newer frlake judges every rejection again (the catalog says which frlake judged it)
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl, fl.catalog.engine.begin() as conn:
        conn.execute(text("UPDATE files SET frlake_version = '0.0.1'"))
    with Frlake(settings) as fl:
        assert fl.ingest([tmp_path / "nfs"]).rejected == 1


def test_an_unreadable_file_is_retried_every_run(tmp_path, corpus):
    import os

    if os.geteuid() == 0:
        pytest.skip("root reads every file")
    tree = tmp_path / "nfs" / "job-x/attempt-0/h"
    tree.mkdir(parents=True)
    target = tree / "rank_0"
    shutil.copy(corpus / "job-223715/attempt-0/gpu-b03/rank_0", target)
    target.chmod(0)
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as fl:
        assert fl.ingest([tmp_path / "nfs"]).rejected_by_reason == {"unreadable": 1}
    target.chmod(0o644)  # chmod leaves the mtime alone
    with Frlake(settings) as fl:
        assert fl.ingest([tmp_path / "nfs"]).ingested == 1


# -- forget -------------------------------------------------------------------
@pytest.mark.slow
def test_forget_an_attempt_leaves_the_lake_of_a_clean_ingest_without_it(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus)
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=3))
    with Frlake(settings) as fl:
        dry = fl.forget(job=JOB, attempt=1, options=ForgetOptions(dry_run=True))
        assert (dry.dumps, dry.attempts_removed) == (8, [(JOB, 1)])
        assert fl.catalog.attempts.exists(JOB, 1), "a dry run changes nothing"
        shas = [r[0] for r in fl.connect().execute(
            f"SELECT sha256 FROM dumps WHERE job = '{JOB}' AND attempt = 1").fetchall()]
        done = fl.forget(job=JOB, attempt=1, options=NOW)
        assert (done.dumps, done.attempts_removed, done.attempts_changed) == (8, [(JOB, 1)], [])
        assert not fl.catalog.attempts.exists(JOB, 1) and fl.catalog.diagnoses.get(JOB, 1) is None
    assert not any((settings.lake / "raw" / sha[:2] / f"{sha}.zst").exists() for sha in shas)
    assert_lake_is_clean(settings)
    # the same as a lake that never held the attempt (but for the forgotten files' records)
    shutil.rmtree(tree / JOB / "attempt-1")
    clean = Settings.resolve(tmp_path / "clean")
    with Frlake(clean) as fl:
        fl.ingest([tree])
    got, want = snapshot(settings), snapshot(clean)
    assert {k: v for k, v in got.items() if k != "catalog_files"} == {k: v for k, v in want.items() if k != "catalog_files"}
    forgotten = [f for f in got["catalog_files"] if f[1] == "forgotten"]
    assert len(forgotten) == 8 and all("/attempt-1/" in f[0] for f in forgotten)


def test_forgotten_files_stay_out_of_cron_and_come_back_under_the_right_identity(tmp_path, corpus, views):
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(identity=IdentityOptions(job="wrong")))
    with Frlake(settings) as fl:
        fl.forget(job="wrong", options=NOW)
    with Frlake(settings) as fl:
        cron = fl.ingest([tree], IngestOptions(identity=IdentityOptions(job="wrong")))
    assert (cron.ingested, cron.skipped_forgotten) == (0, 4), "retention is not undone by the next cron run"
    with Frlake(settings) as fl:
        right = fl.ingest([tree])
    assert right.ingested == 4
    con = views(settings.lake)
    assert con.execute("SELECT DISTINCT job FROM dumps").fetchall() == [("job-223715",)]
    assert len(list((settings.lake / "raw").rglob("*.zst"))) == 4


@pytest.mark.slow
def test_forget_by_path_rewrites_the_attempt_and_diagnoses_it_again(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus)
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=3))
    host = tree / JOB / "attempt-0/gpu-a02"
    with Frlake(settings) as fl:
        before = fl.catalog.attempts.revision(JOB, 0)
        done = fl.forget(path=str(host), options=NOW)
        assert (done.dumps, done.attempts_changed, done.attempts_removed) == (2, [(JOB, 0)], [])
        assert fl.catalog.attempts.revision(JOB, 0) == before + 1
        assert fl.catalog.diagnoses.pending() == [], "the changed attempt is diagnosed again"
        assert sorted(fl.catalog.diagnoses.get(JOB, 0).ranks_dumped) == [2, 3, 4, 5, 6, 7]
    assert_lake_is_clean(settings)
    shutil.rmtree(host)
    clean = Settings.resolve(tmp_path / "clean")
    with Frlake(clean) as fl:
        fl.ingest([tree])
    got, want = snapshot(settings), snapshot(clean)
    for table in ("entries", "dumps", "groups", "pg_status"):
        assert got[table] == want[table], table


@pytest.mark.slow
def test_forget_by_age(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus)
    with Frlake(settings) as fl:
        fl.ingest([tree])
    old = _cli(settings, "forget", "--before", "1971-01-01", "--format", "json")
    assert old.exit_code == 0 and '"dumps": 0' in old.output
    everything = _cli(settings, "forget", "--older-than", "0s", "--grace", "0s")
    assert everything.exit_code == 0, everything.output
    assert "forgot 28 dumps" in everything.output
    with Frlake(settings) as fl:
        assert fl.catalog.attempts.keys() == []
    assert list((settings.lake / "raw").rglob("*.zst")) == []
    assert {p.name for p in (settings.lake / "tables").iterdir()} >= {"entries", "dumps"}
    assert visible_parquet(settings) == {f for f in visible_parquet(settings) if f.startswith("tables/stacks/")}


def test_forget_needs_a_selection(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree])
    result = _cli(settings, "forget")
    assert result.exit_code == 2 and "say what to forget" in result.output
    assert _cli(settings, "forget", "--older-than", "ninety days").exit_code == 2


# -- compact ------------------------------------------------------------------
@pytest.mark.slow
def test_compact_merges_small_files_and_keeps_every_row(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus)
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=None))
    before = snapshot(settings)
    with Frlake(settings) as fl:
        n_before = len(LakeFiles(fl.catalog).committed())
        early = fl.connect()  # a reader that built its views before the compaction
        count = early.execute("SELECT count(*) FROM entries").fetchone()[0]
        summary = fl.compact(options=CompactOptions())
        assert summary.files_before > summary.files_after
        files = LakeFiles(fl.catalog).committed()
        per_partition = {(f.table, f.job, f.attempt) for f in files}
        assert len(files) == len(per_partition) < n_before, "one file per table and attempt, and one of stacks"
        assert early.execute("SELECT count(*) FROM entries").fetchone()[0] == count, "the old files stay for readers"
    assert snapshot(settings) == before
    with Frlake(settings) as fl:
        fl.compact(options=CompactOptions(retire_grace_s=0))  # nothing left to merge; the sweep deletes the old files
    assert_lake_is_clean(settings)


@pytest.mark.slow
def test_a_partition_merged_into_several_files_keeps_every_row_in_order_and_a_failed_merge_keeps_nothing(
        tmp_path, corpus):
    """The merged files of one partition are written side by side: each holds its group of files' rows in their
    order, the same files as one after the other. When one of them cannot be written (a file of its group is
    damaged), no merged file is kept nor published, and the compaction completes once the file is whole again."""
    tree, settings = _many_files(tmp_path, corpus, jobs=(JOB,))
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=None, diagnose=False))
    before = snapshot(settings)
    with Frlake(settings) as fl:
        files = [f for f in LakeFiles(fl.catalog).committed("entries") if (f.job, f.attempt) == (JOB, 0)]
        assert len(files) == 8
        rows = [pq.read_table(settings.lake / f.readable).to_pylist() for f in files]
        target = sum(f.bytes for f in files) // 3 + 1  # about three merged files
        victim = settings.lake / files[-1].readable
        whole = victim.read_bytes()
        victim.write_bytes(whole[: len(whole) // 2])
        with pytest.raises(Exception):  # noqa: B017 - whatever pyarrow says of a truncated file
            fl.compact([(JOB, 0)], CompactOptions(target_bytes=target))
        assert [f for f in LakeFiles(fl.catalog).committed("entries") if (f.job, f.attempt) == (JOB, 0)] == files
        assert not list((settings.lake / ".staging").rglob("*.parquet*")), "no merged file is left staged"
        victim.write_bytes(whole)
        summary = fl.compact([(JOB, 0)], CompactOptions(target_bytes=target, retire_grace_s=0))
        merged = [f for f in LakeFiles(fl.catalog).committed("entries") if (f.job, f.attempt) == (JOB, 0)]
        assert summary.files_before >= 8 and len(merged) >= 2
        got = [r for f in merged for r in pq.read_table(settings.lake / f.readable).to_pylist()]
        assert got == [r for part in rows for r in part], "the rows of the old files, in their order"
    assert snapshot(settings) == before
    assert_lake_is_clean(settings)


def test_compaction_writes_the_current_schema(tmp_path, corpus):
    """A file from an older frlake (a column missing) is read with NULLs for it."""
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=2, compact_min_files=None))
    with Frlake(settings) as fl:
        old = LakeFiles(fl.catalog).committed("dumps")[0]
        path = settings.lake / old.readable
        pq.write_table(pq.read_table(path).drop_columns(["extra"]), path)
        fl.compact(options=CompactOptions(retire_grace_s=0))
        merged = LakeFiles(fl.catalog).committed("dumps")
        assert len(merged) == 1
        table = pq.read_table(settings.lake / merged[0].readable)
        assert "extra" in table.column_names and table.num_rows == 4
        assert table.column("extra").null_count >= 2


@pytest.mark.slow
def test_ingest_compacts_the_attempts_it_touched(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=(JOB,))
    with Frlake(settings) as fl:
        summary = fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=4))
    assert summary.compacted > 0
    with Frlake(settings) as fl:
        for table, job, attempt, n in LakeFiles(fl.catalog).partition_file_counts(min_files=1):
            assert n < 4, (table, job, attempt, n)
        assert fl.connect().execute("SELECT count(*) FROM dumps").fetchone()[0] == 24


def test_one_worker_keeps_its_batches_whole_so_a_run_compacts_nothing_it_just_wrote(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=(JOB,))  # 3 attempts of 8 dumps, in path order
    with Frlake(settings) as fl:
        summary = fl.ingest([tree], IngestOptions(chunk_files=4, compact_min_files=4, diagnose=False))
    assert summary.compacted == 0
    with Frlake(settings) as fl:
        counts = {(table, attempt): n
                  for table, _, attempt, n in LakeFiles(fl.catalog).partition_file_counts(min_files=1)
                  if table != "stacks"}
    # each attempt's 8 dumps in 2 whole batches of 4 (cutting the last batches smaller made 7 files of attempt 2)
    assert set(counts.values()) == {2} and {a for _, a in counts} == {0, 1, 2}, counts


@pytest.mark.slow
def test_compact_command(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=None))
    dry = _cli(settings, "compact", "--dry-run")
    assert dry.exit_code == 0 and "would merge 24 files of 6 partitions" in dry.output, dry.output
    done = _cli(settings, "compact", "--job", "job-223715", "--grace", "0s", "--format", "json")
    assert done.exit_code == 0 and '"files_after": 6' in done.output, done.output  # one per table of the attempt


# -- unattended -----------------------------------------------------------------
def test_quiet_ingest_prints_only_problems(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    good = _cli(settings, "ingest", str(tree), "--quiet", "--workers", "1")
    assert (good.exit_code, good.output) == (0, "")
    (tree / "job-223715/attempt-0/gpu-b03/rank_9").write_bytes(b"not a dump")
    bad = _cli(settings, "ingest", str(tree), "--quiet", "--workers", "1")
    assert bad.exit_code == 3 and "rank_9" in bad.output and "ingested" not in bad.output


def test_a_busy_lake_makes_ingest_exit_1_with_a_clear_message(tmp_path, corpus):
    from frlake.storage.lake import Lake

    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree])
    with Lake(settings.lake).write_lock():
        result = _cli(settings, "ingest", str(tree), "--lock-timeout", "0.2s", "--force", "--workers", "1")
        forget = _cli(settings, "forget", "--job", "job-223715", "--lock-timeout", "0.2s")
    assert result.exit_code == 1 and "is busy" in result.output
    assert forget.exit_code == 1 and "is busy" in forget.output


def test_downgrade_that_loses_data_asks_first(tmp_path, corpus):
    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    with Frlake(settings) as fl:
        fl.ingest([tree])
    refused = _cli(settings, "db", "downgrade", "0004")
    assert refused.exit_code == 1 and "--yes" in refused.output and "second identities" in refused.output.replace("\n", " ")
    assert _cli(settings, "db", "current").output.startswith(f"current {head_revision()}")
    assert _cli(settings, "db", "downgrade", "0004", "--yes").exit_code == 0
    assert _cli(settings, "db", "upgrade").exit_code == 0


def test_serve_watch_scans_and_shows_its_scans(tmp_path, corpus):
    import time

    from frlake.server import create_app
    from frlake.server.config import ServerConfig
    from frlake.server.watch import watch_config

    tree, settings = _many_files(tmp_path, corpus, jobs=("job-223715",))
    app = create_app(ServerConfig(settings, watch=watch_config([str(tree)], 0.2)))
    client = app.test_client()
    deadline = time.monotonic() + 60
    while client.get("/api/watch").get_json().get("scans", 0) < 1 and time.monotonic() < deadline:
        time.sleep(0.1)
    first = client.get("/api/watch").get_json()
    assert first["watching"] and first["total_ingested"] == 4 and first["last_error"] is None
    (tree / "job-223715/attempt-1/h").mkdir(parents=True)
    (tree / "job-223715/attempt-1/h/rank_0").write_bytes(b"junk")
    while client.get("/api/watch").get_json()["total_rejected"] == 0 and time.monotonic() < deadline:
        time.sleep(0.1)
    status = client.get("/api/watch").get_json()
    assert status["total_rejected"] == 1 and status["next_run_at"] and status["errors"] == 0
    page = client.get("/").get_data(as_text=True)
    assert "Watching" in page and "Last scan finished" in page
    app.extensions["frlake_watch"].stop(10)
    assert client.get("/api/watch").get_json()["scans"] >= 2
    assert datetime.fromisoformat(status["last_finished_at"].replace("Z", "+00:00")) <= datetime.now(UTC)


def test_no_watch_is_said_plainly(tmp_path):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    app = create_app(ServerConfig(Settings.resolve(tmp_path / "lake")))
    assert app.test_client().get("/api/watch").get_json() == {"watching": False}


def test_a_rewrite_holds_a_row_group_of_bounded_bytes(tmp_path):
    """The groups of a 16,384-rank attempt are 80,000 rows of up to 16,384 ranks each: held as one row group
    of 256k rows, a compaction took 2.5 GB. Row groups are cut by bytes as well as by rows."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from frlake import schema
    from frlake.storage.lake import Lake

    world = list(range(16384))
    rows = [{"dump_id": d, "rank": d, "host": "h", "pg_name": "0", "pg_desc": "default_pg", "ranks": world,
             "group_size": len(world), "ranks_raw": None} for d in range(64)]
    batches = [pa.RecordBatch.from_pylist(rows[i:i + 8], schema=schema.GROUPS) for i in range(0, 64, 8)]
    lake = Lake(tmp_path / "lake")
    staged, n, _ = lake.stage_batches(schema.GROUPS, iter(batches), max_bytes=1 << 20)
    meta = pq.ParquetFile(staged).metadata
    assert n == meta.num_rows == 64
    assert meta.num_row_groups >= 4  # 64 rows of 64 KB each, about 1 MB a row group
    assert pq.read_table(staged).column("ranks").to_pylist() == [world] * 64


def test_read_ahead_gives_every_batch_in_order_holds_few_and_stops_with_its_caller():
    """A rewrite decodes the next batches while it writes the ones before (frlake.storage.rewrite.read_ahead):
    every batch comes, in order; no more than its byte budget (and the batch being read) waits; the reader's
    error reaches the caller; and a caller that stops stops the reader."""
    import threading

    import pyarrow as pa

    from frlake.storage.rewrite import read_ahead

    batches = [pa.record_batch({"x": pa.array(range(i * 1000, (i + 1) * 1000), pa.int64())}) for i in range(40)]
    size = batches[0].nbytes
    made = []

    def source(fail_at=None):
        for i, b in enumerate(batches):
            if i == fail_at:
                raise ValueError("a damaged file")
            made.append(i)
            yield b

    got = []
    for b in read_ahead(source(), max_bytes=3 * size):
        assert len(made) - len(got) <= 3 + 2, "at most the budget waits, beside the one read and the one taken"
        got.append(b)
    assert [b.column(0).to_pylist() for b in got] == [b.column(0).to_pylist() for b in batches]

    made.clear()
    with pytest.raises(ValueError, match="a damaged file"):
        list(read_ahead(source(fail_at=5), max_bytes=size))
    assert made == [0, 1, 2, 3, 4]

    made.clear()
    early = read_ahead(source(), max_bytes=size)
    assert [next(early).column(0)[0].as_py() for _ in range(2)] == [0, 1000]
    early.close()
    assert not [t for t in threading.enumerate() if t.name == "frlake-read-ahead"], "the reader has ended"
    assert len(made) < len(batches), "and did not read on to the end"
