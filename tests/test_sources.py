"""Archives, identity sources and the duplicate path of parallel ingest."""

from __future__ import annotations

import shutil
import tarfile

import pytest

from frlake.errors import FrlakeError
from frlake.ingest import IdentityOptions, IngestOptions, Layout, load_hosts
from tests.helpers import FIXTURES


def test_tar_gz_is_streamed_with_its_member_paths(tmp_path, corpus, fl):
    archive = tmp_path / "dumps.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(corpus / "job-223715", arcname="job-223715")
        link = tarfile.TarInfo("job-223715/attempt-0/gpu-b03/rank_9")
        link.type, link.linkname = tarfile.SYMTYPE, "/etc/passwd"
        tar.addfile(link)
    summary = fl.ingest([archive])
    assert (summary.ingested, summary.rejected) == (4, 1)
    assert summary.rejected_files[0]["reason"] == "unsafe_archive_member"
    con = fl.connect()
    assert sorted(con.execute("SELECT job, attempt, rank, host FROM dumps").fetchall()) == [
        ("job-223715", 0, 0, "gpu-b03"), ("job-223715", 0, 1, "gpu-b03"),
        ("job-223715", 0, 2, "gpu-c04"), ("job-223715", 0, 3, "gpu-c04")]
    assert con.execute("SELECT count(*) FROM dumps WHERE source_path LIKE '%dumps.tar.gz::job-223715/%'").fetchone()[0] == 4
    again = fl.ingest([archive])
    assert (again.ingested, again.unchanged) == (0, 1)


def test_corrupt_archive_is_rejected_and_does_not_stop_the_run(tmp_path, corpus, fl):
    bad = tmp_path / "in" / "broken.tar.gz"
    bad.parent.mkdir()
    bad.write_bytes(b"\x1f\x8b\x08\x00" + b"not really gzip" * 10)
    shutil.copytree(corpus / "job-223715", tmp_path / "in" / "job-223715")
    summary = fl.ingest([tmp_path / "in"])
    assert summary.ingested == 4
    assert summary.rejected_by_reason == {"bad_archive": 1}


def test_layout_placeholders_and_suffixes():
    layout = Layout("{*}/{job}/run{attempt}/{host}/trace_rank_{rank}")
    assert layout.match("/nfs/x/train-7/run3/node-1/trace_rank_12.pkl") == {
        "job": "train-7", "attempt": "3", "host": "node-1", "rank": "12"}
    assert layout.match("/nfs/x/train-7/run3/node-1/other_12") == {}
    with pytest.raises(FrlakeError):
        Layout("{job}/{nope}")


def test_hosts_file_and_trailing_digits_name_host_and_rank(tmp_path, corpus, fl):
    flat = tmp_path / "flat"
    flat.mkdir()
    for rank, host in ((0, "gpu-b03"), (2, "gpu-c04")):
        shutil.copy(corpus / f"job-223715/attempt-0/{host}/rank_{rank}", flat / f"nccl_trace_rank_{rank}")
    hosts = tmp_path / "hosts.csv"
    hosts.write_text("rank,host\n0,node-a\n2,node-c\n")
    assert load_hosts(hosts) == {0: "node-a", 2: "node-c"}
    options = IngestOptions(identity=IdentityOptions(job="j", attempt=1, hosts=load_hosts(hosts)))
    summary = fl.ingest([flat], options)
    assert summary.ingested == 2
    con = fl.connect()
    assert sorted(con.execute("SELECT rank, host FROM dumps").fetchall()) == [(0, "node-a"), (2, "node-c")]


def test_unknown_identity_is_rejected_not_guessed(tmp_path, corpus, fl):
    flat = tmp_path / "flat"
    flat.mkdir()
    shutil.copy(corpus / "job-223715/attempt-0/gpu-b03/rank_0", flat / "dump")
    summary = fl.ingest([flat])  # its folder is its job (a flat folder, attempt 0); its name holds no rank
    assert summary.rejected == 1 and summary.rejected_files[0]["reason"] == "unknown_identity"
    assert "the rank" in summary.rejected_files[0]["detail"] and "--rank" in summary.rejected_files[0]["detail"]


def test_self_describing_dump_names_itself(fl):
    folder = FIXTURES / "formats" / "self_describing"
    assert fl.ingest([folder]).ingested == 2
    con = fl.connect()
    assert sorted(con.execute("SELECT job, attempt, host, rank FROM dumps").fetchall()) == [
        ("fmt-self_describing", 0, "host-a", 0), ("fmt-self_describing", 0, "host-b", 1)]


def test_same_bytes_in_parallel_batches_are_stored_once(tmp_path, corpus, fl):
    tree = tmp_path / "nfs"
    for copy in ("a", "b"):  # two copies of two attempts holding the same bytes, racing in two workers
        for n in range(2):
            shutil.copytree(corpus / "job-f70c5d/attempt-0", tree / copy / "job-f70c5d" / f"attempt-{n}")
    summary = fl.ingest([tree], IngestOptions(workers=2, chunk_files=2))
    assert (summary.ingested, summary.already_present) == (16, 16), "a dump per attempt; copies within one are duplicates"
    con = fl.connect()
    assert con.execute("SELECT count(*), count(DISTINCT sha256) FROM dumps").fetchone() == (16, 8)
    assert len(list((fl.settings.lake / "raw").rglob("*.zst"))) == 8, "the raw bytes are stored once"
    per_dump = con.execute("SELECT count(DISTINCT dump_id) FROM entries").fetchone()[0]
    assert per_dump == 16
    assert con.execute("SELECT count(*) FROM entries").fetchone()[0] == summary.entries


def test_a_lake_inside_the_ingested_tree_is_not_ingested(tmp_path, corpus, fl):
    shutil.copytree(corpus / "job-223715", tmp_path / "job-223715")
    first = fl.ingest([tmp_path])
    again = fl.ingest([tmp_path])
    assert (first.ingested, first.rejected) == (4, 0)
    assert (again.ingested, again.rejected, again.unchanged) == (0, 0, 4)
