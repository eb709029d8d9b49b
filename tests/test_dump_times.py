"""When a dump was written decides whether its pending collectives mean a hang. Without a time in the file
name that is the file's mtime, which a copy (cp without -p) or an upload does not keep: such a time must
never turn a healthy job, or a rank that was merely behind, into a proven culprit."""

from __future__ import annotations

import io
import os
import shutil
import tarfile

import pytest

from frlake.ingest.identity import IdentityOptions
from frlake.ingest.pipeline import IngestOptions
from tests.helpers import FIXTURES

TAIL = FIXTURES / "producers" / "pending_tail" / "job-tail"
NAMED_S = {"attempt-0": 1796000700, "attempt-1": 1796000002}  # the time in the fixtures' names
DAY_S = 86_400


def _without_times(tmp_path, attempt: str, mtime_s: float):
    """The attempt's dumps as a watchdog writes them by default: ``nccl_trace_rank_<r>``, no time in the name,
    the time in the file's mtime."""
    out = tmp_path / "in" / "job-tail" / attempt
    for src in sorted((TAIL / attempt).rglob("nccl_trace_rank_*")):
        rank = src.name.split("_")[3]
        dst = out / src.parent.name / f"nccl_trace_rank_{rank}"
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, dst)
        os.utime(dst, (mtime_s, mtime_s))
    return out


def test_a_timeout_dump_dated_by_its_mtime_names_the_pending_tail_culprit(tmp_path, fl):
    folder = _without_times(tmp_path, "attempt-0", NAMED_S["attempt-0"])
    fl.ingest([folder])
    d = fl.diagnose("job-tail", 0, store=False)
    assert (d.verdict, d.root.rank, d.root.host, d.root.role) == ("hang", 3, "node-b", "root"), d.summary
    assert d.timing["overdue_from"] == "mtime" and d.timing["dump_time_from"] == ["mtime"]
    assert "weaker evidence" in d.root.detail and "mtime" in d.root.detail


@pytest.mark.slow
def test_dumps_copied_days_later_do_not_prove_a_hang(tmp_path, fl):
    """The same dumps, their mtimes a day after their newest entries: more likely the time of a copy. The
    rank is named as a suspect only, and the fleet reports that act on root causes never count it."""
    folder = _without_times(tmp_path, "attempt-0", NAMED_S["attempt-0"] + DAY_S)
    fl.ingest([folder])
    d = fl.diagnose("job-tail", 0)
    assert d.timing["overdue_from"] == "mtime_after_copy"
    assert d.verdict == "hang" and {c.role for c in d.culprits} == {"suspect"}, d.summary
    assert d.root.rank == 3 and "not a proven cause" in d.root.detail and "perhaps a hang" in d.summary
    assert [r for r in fl.report("flaky-hosts") if r["culprit_attempts"]] == []
    assert [r for r in fl.report("drain") if r["incidents"]] == []


def test_a_healthy_snapshot_copied_later_names_no_proven_culprit(tmp_path, fl):
    """A periodic snapshot of a job at work (tails 2 s old), copied a day later."""
    folder = _without_times(tmp_path, "attempt-1", NAMED_S["attempt-1"] + DAY_S)
    fl.ingest([folder])
    d = fl.diagnose("job-tail", 1, store=False)
    assert not any(c.role == "root" for c in d.culprits), d.summary


@pytest.mark.slow
def test_the_time_of_an_upload_is_not_the_time_its_dumps_were_written(fl):
    """A plain uploaded file has no time but the upload's; a tar member keeps its file's mtime."""
    ranks = sorted((TAIL / "attempt-0").rglob("nccl_trace_rank_*"))
    options = IngestOptions(workers=1, isolate=True,
                            identity=IdentityOptions(job="plain", attempt=0, layout="{host}/nccl_trace_rank_{rank}"))
    for src in ranks:
        rank = src.name.split("_")[3]
        fl.ingest_upload([(f"nccl_trace_rank_{rank}", src.read_bytes())],
                         IngestOptions(workers=1, isolate=True, identity=IdentityOptions(
                             job="plain", attempt=0, host=src.parent.name, rank=int(rank))))
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for src in ranks:
            info = tarfile.TarInfo(f"{src.parent.name}/nccl_trace_rank_{src.name.split('_')[3]}")
            data = src.read_bytes()
            info.size, info.mtime = len(data), NAMED_S["attempt-0"]
            tar.addfile(info, io.BytesIO(data))
    options = IngestOptions(workers=1, isolate=True, identity=IdentityOptions(
        job="packed", attempt=0, layout="{host}/nccl_trace_rank_{rank}"))
    summary = fl.ingest_upload([("dumps.tar.gz", buf.getvalue())], options)
    assert summary.rejected == 0, summary.rejected_files
    rows = fl.connect().execute("""SELECT job, written_from, min(written_ns) FROM snapshots
                                   GROUP BY ALL ORDER BY job""").fetchall()
    assert rows == [("packed", "mtime", NAMED_S["attempt-0"] * 10**9), ("plain", None, None)]
    packed = fl.diagnose("packed", 0, store=False)
    assert (packed.verdict, packed.root.rank, packed.root.role) == ("hang", 3, "root"), packed.summary
    plain = fl.diagnose("plain", 0, store=False)
    assert not any(c.role == "root" and c.evidence == "pending_tail" for c in plain.culprits), plain.summary


@pytest.mark.slow
def test_a_hostile_archive_mtime_is_no_time(tmp_path, fl):
    src = next((TAIL / "attempt-0").rglob("nccl_trace_rank_0_*"))
    archive = tmp_path / "in" / "dumps.tar"
    archive.parent.mkdir()
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("node-a/nccl_trace_rank_0")
        data = src.read_bytes()
        info.size, info.mtime = len(data), 2**70
        tar.addfile(info, io.BytesIO(data))
    summary = fl.ingest([archive], IngestOptions(identity=IdentityOptions(
        job="j", attempt=0, layout="{host}/nccl_trace_rank_{rank}")))
    assert summary.ingested == 1, summary.rejected_files
    assert fl.connect().execute("SELECT written_from, written_ns FROM snapshots").fetchall() == [(None, None)]


@pytest.mark.slow
def test_a_time_in_a_name_stands_for_its_whole_second(tmp_path, fl):
    """job-tail's pending collectives were created at ...000.5 s with a 600 s timeout. A name's
    ``<epoch seconds>`` is the interval [t, t + 1 s): at second 1796000600 the collective was 599.5 to
    600.5 s old, which cannot tell (overdue NULL, never "in flight"); at ...599 it was younger than its
    timeout all along, at ...601 older. An mtime inside the name's second is the exact time."""
    out = tmp_path / "in"
    for second in (599, 600, 601):
        for src in sorted((TAIL / "attempt-1").rglob("nccl_trace_rank_*")):
            rank = src.name.split("_")[3]
            dst = out / f"s{second}" / "job-tail" / f"attempt-{second}" / src.parent.name / f"rank_{rank}.1796000{second}"
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
    exact = out / "s600" / "job-tail" / "attempt-600" / "node-a" / "rank_0.1796000600"
    os.utime(exact, ns=(1796000600_700_000_000, 1796000600_700_000_000))  # 600.2 s old: overdue
    fl.ingest([out])
    rows = dict(((a, r), o) for a, r, o in fl.connect().execute(
        "SELECT attempt, rank, overdue FROM snapshots WHERE job = 'job-tail'").fetchall())
    assert {r: rows[(599, r)] for r in range(4)} == dict.fromkeys(range(4), False)
    assert {r: rows[(601, r)] for r in range(4)} == dict.fromkeys(range(4), True)
    assert {r: rows[(600, r)] for r in range(4)} == {0: True, 1: None, 2: None, 3: None}
    assert fl.diagnose("job-tail", 600, store=False).timing["in_flight"] is False
