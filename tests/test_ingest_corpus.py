"""Ingest of the real corpus written by PyTorch (pickle and JSON)."""

from __future__ import annotations

import hashlib
import os
import re
import shutil

import pytest

from frlake.ingest import IdentityOptions, IngestOptions
from tests.helpers import load_trusted

PATH_RE = re.compile(r"(?P<job>[^/]+)/attempt-(?P<attempt>\d+)/(?P<host>[^/]+)/rank_(?P<rank>\d+)(\.json)?$")


def test_entry_rows_equal_entries_in_files(corpus, corpus_lake, views):
    expected = {}
    for path in corpus.rglob("rank_*"):
        m = PATH_RE.search(path.as_posix())
        key = (m["job"], int(m["attempt"]), int(m["rank"]))
        expected[key] = len(load_trusted(path)["entries"])
    con = views(corpus_lake.lake)
    got = {(j, a, r): n for j, a, r, n in con.execute("SELECT job, attempt, rank, count(*) FROM entries GROUP BY ALL").fetchall()}
    assert got == expected
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == sum(expected.values())
    assert con.execute("SELECT count(*) FROM dumps").fetchone()[0] == len(expected)


def test_rank_and_host_of_every_dump_match_its_path(corpus_lake, views):
    con = views(corpus_lake.lake)
    rows = con.execute("SELECT job, attempt, rank, host, source_path FROM dumps").fetchall()
    assert len(rows) == 167
    for job, attempt, rank, host, path in rows:
        m = PATH_RE.search(path)
        assert (job, attempt, rank, host) == (m["job"], int(m["attempt"]), int(m["rank"]), m["host"])
    # every entry row carries the identity of its dump
    mismatched = con.execute(
        "SELECT count(*) FROM entries e JOIN dumps d USING (dump_id) "
        "WHERE e.rank <> d.rank OR e.host <> d.host OR e.job <> d.job OR e.attempt <> d.attempt"
    ).fetchone()[0]
    assert mismatched == 0


def test_fields_survive_both_encodings(corpus, corpus_lake, views):
    con = views(corpus_lake.lake)
    by_encoding = dict(con.execute("SELECT encoding, count(*) FROM dumps GROUP BY 1").fetchall())
    n_json = len(list(corpus.rglob("rank_*.json")))
    assert by_encoding == {"pickle": 167 - n_json, "json": n_json} and n_json > 0
    # JSON writes 0 for unknown times and has no frames: stored as NULL
    row = con.execute(
        "SELECT count(*) FILTER (WHERE e.time_discovered_started_ns = 0), count(*) FILTER (WHERE e.stack_id IS NOT NULL) "
        "FROM entries e JOIN dumps d USING (dump_id) WHERE d.encoding = 'json'"
    ).fetchone()
    assert row == (0, 0)
    # pickles keep their frames, each distinct stack stored once
    assert con.execute("SELECT count(*) FROM entries e JOIN dumps d USING (dump_id) WHERE d.encoding='pickle' AND stack_id IS NULL").fetchone()[0] == 0
    assert con.execute("SELECT count(*) - count(DISTINCT stack_id) FROM stacks").fetchone()[0] == 0
    assert con.execute("SELECT count(*) FROM entries e LEFT JOIN stacks s USING (stack_id) WHERE e.stack_id IS NOT NULL AND s.stack_id IS NULL").fetchone()[0] == 0
    sample = con.execute(
        "SELECT pg_name, pg_desc, op, backend, input_sizes, output_sizes, input_dtypes FROM entries "
        "WHERE job = 'job-223715' AND rank = 1 ORDER BY record_id LIMIT 1"
    ).fetchone()
    assert sample == ("1", "tp", "all_gather", "gloo", [[64, 32]], [[2, 64, 32]], ["Float"])
    groups = con.execute("SELECT ranks FROM groups WHERE job='job-223715' AND rank=1 AND pg_desc='dp'").fetchone()
    assert groups == ([1, 3],)
    status = con.execute("SELECT last_enqueued_collective FROM pg_status WHERE job='job-f70c5d' AND attempt=2 AND rank=2 AND pg_id='0'").fetchone()
    assert status == (19,)  # a string in the JSON dump, an integer here


@pytest.mark.slow
def test_reingest_adds_nothing(corpus, fl):
    first = fl.ingest([corpus])
    assert first.ingested == 167
    again = fl.ingest([corpus])
    assert (again.ingested, again.unchanged, again.rejected) == (0, 167, 0)
    forced = fl.ingest([corpus], IngestOptions(force=True))
    assert (forced.ingested, forced.already_present) == (0, 167)
    con = fl.connect()
    assert con.execute("SELECT count(*) FROM dumps").fetchone()[0] == 167
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == first.entries


def test_truncated_file_is_rejected_and_others_ingested(tmp_path, corpus, fl):
    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715", tree / "job-223715")
    victim = tree / "job-223715/attempt-0/gpu-b03/rank_1"
    whole = victim.read_bytes()
    victim.write_bytes(whole[: len(whole) // 2])
    summary = fl.ingest([tree])
    assert summary.rejected == 1 and summary.ingested == 3
    assert summary.rejected_files[0]["reason"] == "truncated"
    rejected = fl.catalog.files.records(status="rejected")
    assert [(r.path, r.reason) for r in rejected] == [(str(victim), "truncated")]
    # unchanged bytes are not retried; once the write completes the file is ingested
    assert fl.ingest([tree]).rejected == 0
    victim.write_bytes(whole)
    later = fl.ingest([tree])
    assert (later.ingested, later.unchanged) == (1, 3)
    assert fl.catalog.files.records(status="rejected") == []


@pytest.mark.slow
def test_rewritten_file_is_a_new_version_and_copies_are_not_ingested_twice(tmp_path, corpus, fl):
    tree = tmp_path / "nfs"
    shutil.copytree(corpus / "job-223715", tree / "job-223715")
    fl.ingest([tree])
    # the same bytes under another attempt: that attempt holds them too (the raw bytes stay stored once)
    shutil.copytree(tree / "job-223715/attempt-0", tree / "job-223715/attempt-9")
    second = fl.ingest([tree])
    assert (second.ingested, second.already_present) == (4, 0)
    assert len(list((fl.settings.lake / "raw").rglob("*.zst"))) == 4
    diag = fl.diagnose("job-223715", 9)
    assert sorted(diag.ranks_dumped) == [0, 1, 2, 3] and diag.ranks_missing_dump == []
    # a copy within the same attempt is a duplicate, and the record names who holds the bytes
    shutil.copytree(tree / "job-223715/attempt-9", tree / "copies/job-223715/attempt-9")
    dup = fl.ingest([tree])
    assert (dup.ingested, dup.already_present) == (0, 4)
    copies = [f for f in fl.catalog.files.records() if "/copies/" in f.path]
    assert {f.status for f in copies} == {"duplicate"} and {f.attempt for f in copies} == {9}
    assert all("already in the lake as job 'job-223715' attempt 9" in f.detail for f in copies)
    # new bytes at a known path: a new version
    target = tree / "job-223715/attempt-0/gpu-c04/rank_2"
    other = load_trusted(corpus / "job-5f5228/attempt-0/gpu-b01/rank_2")
    import pickle

    target.write_bytes(pickle.dumps(other))
    os.utime(target, ns=(1, 1))
    newer = fl.ingest([tree])
    assert newer.ingested == 1
    files = {f.path: f for f in fl.catalog.files.records()}
    assert files[str(target)].status == "ingested"
    con = fl.connect()
    assert con.execute(f"SELECT count(*) FROM dumps WHERE source_path = '{target}'").fetchone()[0] == 2


def test_explicit_options_win_over_the_layout(corpus, fl):
    src = corpus / "job-223715/attempt-0"
    summary = fl.ingest([src], IngestOptions(identity=IdentityOptions(job="renamed", attempt=5)))
    assert summary.ingested == 4
    con = fl.connect()
    assert con.execute("SELECT DISTINCT job, attempt FROM dumps").fetchall() == [("renamed", 5)]
    assert sorted(con.execute("SELECT rank, host FROM dumps").fetchall()) == [
        (0, "gpu-b03"), (1, "gpu-b03"), (2, "gpu-c04"), (3, "gpu-c04")]


def test_original_bytes_are_kept_and_come_back_exactly(corpus, corpus_lake, views):
    from frlake.storage.lake import Lake

    lake = Lake(corpus_lake.lake)
    con = views(corpus_lake.lake)
    for path, sha in con.execute("SELECT source_path, sha256 FROM dumps").fetchall():
        data = lake.read_raw(sha)
        assert hashlib.sha256(data).hexdigest() == sha
        assert data == (corpus / path.split("visible/", 1)[1]).read_bytes()
