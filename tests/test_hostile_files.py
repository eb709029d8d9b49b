"""Issue 9: one bad file never stops the rest. Each test puts one kind of
hostile file beside real dumps and checks that the good ones are ingested and
the bad one is rejected with its reason, through a real ingest."""

from __future__ import annotations

import io
import json
import os
import shutil
import subprocess
import sys
import tarfile
import threading
from pathlib import Path

import pytest
from typer.testing import CliRunner

from frlake.cli.ingest import EXIT_ALL_REJECTED, EXIT_OK, EXIT_SOME_REJECTED
from frlake.cli.main import app
from frlake.config import Settings
from frlake.errors import DumpRejected
from frlake.ingest import IngestOptions
from frlake.ingest.sources import read_regular_file
from frlake.session import Frlake

JOB = "job-223715"  # 4 ranks: gpu-b03 rank_0, rank_1; gpu-c04 rank_2, rank_3
GOOD = [(JOB, 0, "gpu-b03", 0), (JOB, 0, "gpu-b03", 1), (JOB, 0, "gpu-c04", 2), (JOB, 0, "gpu-c04", 3)]
runner = CliRunner()


def good_tree(root: Path, corpus: Path) -> Path:
    shutil.copytree(corpus / JOB, root / JOB)
    return root


def ingested(settings: Settings) -> list[tuple]:
    with Frlake(settings, must_exist=True) as session:
        return sorted(session.connect().execute("SELECT job, attempt, host, rank FROM dumps").fetchall())


def rejected(settings: Settings) -> dict[str, str]:
    """path -> reason of every file the catalog holds as rejected."""
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        return {f.path: f.reason for f in fl.catalog.files.records(status="rejected")}


def run_python(code: str, *args: str, timeout: float = 120, prefix: list[str] = ()) -> dict:
    """Run ``code`` in a fresh interpreter (so that a hang is a failed test and
    its memory is its own); it prints one JSON line."""
    proc = subprocess.run([*prefix, sys.executable, "-c", code, *args], capture_output=True, text=True, timeout=timeout)
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_non_utf8_file_and_folder_names_are_rejected_and_the_tree_ingests(tmp_path, corpus, fl):
    tree = good_tree(tmp_path / "nfs", corpus)
    dump = (corpus / JOB / "attempt-0/gpu-b03/rank_0").read_bytes()
    bad_file = os.fsdecode(str(tree / JOB / "attempt-0/gpu-b03").encode() + b"/rank_\xff9")
    Path(bad_file).write_bytes(dump[:-1] + b".")  # not a copy, so only its name can reject it
    bad_folder = os.fsdecode(str(tree).encode() + b"/job-\xfe/attempt-0/gpu-a01")
    os.makedirs(bad_folder)
    (Path(bad_folder) / "rank_0").write_bytes(dump)
    settings = fl.settings

    summary = fl.ingest([tree])
    assert ingested(settings) == GOOD
    assert summary.rejected_by_reason == {"undecodable_name": 2}
    assert rejected(settings) == {
        f"{tree}/{JOB}/attempt-0/gpu-b03/rank_\\xff9": "undecodable_name",
        f"{tree}/job-\\xfe/attempt-0/gpu-a01/rank_0": "undecodable_name",
    }
    again = fl.ingest([tree])
    assert (again.ingested, again.rejected, again.unchanged, again.skipped_rejected) == (0, 0, 4, 2)


def test_non_utf8_archive_member_name_is_rejected(tmp_path, corpus, fl):
    archive = tmp_path / "dumps.tar"
    with tarfile.open(archive, "w", format=tarfile.GNU_FORMAT) as tar:
        tar.add(corpus / JOB, arcname=JOB)
        tar.add(corpus / "job-227149", arcname=os.fsdecode(b"job-\xff"))
    summary = fl.ingest([archive])
    assert ingested(fl.settings) == GOOD
    assert summary.rejected and set(summary.rejected_by_reason) == {"undecodable_name"}
    assert all("job-\\xff/" in f["path"] for f in summary.rejected_files)


@pytest.mark.slow
def test_a_fifo_on_the_command_line_does_not_hang(tmp_path, corpus):
    tree = good_tree(tmp_path / "nfs", corpus)
    fifo = tmp_path / "nccl_trace_rank_9"
    os.mkfifo(fifo)
    lake = tmp_path / "lake"
    proc = subprocess.run([sys.executable, "-m", "frlake.cli.main", "--lake", str(lake), "ingest", str(fifo), str(tree),
                           "-q", "--workers", "2"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == EXIT_SOME_REJECTED, proc.stderr
    settings = Settings.resolve(lake)
    assert ingested(settings) == GOOD
    assert rejected(settings) == {str(fifo): "not_regular_file"}


def test_reading_a_fifo_swapped_in_after_the_scan_does_not_block(tmp_path):
    fifo = tmp_path / "rank_0"
    os.mkfifo(fifo)
    outcome: list[BaseException | bytes] = []
    reader = threading.Thread(target=lambda: outcome.append(_try_read(fifo)), daemon=True)
    reader.start()
    reader.join(10)
    if reader.is_alive():  # unblock the reader before failing
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("reading a FIFO blocked")
    assert isinstance(outcome[0], DumpRejected) and outcome[0].reason == "not_regular_file"


def _try_read(path: Path):
    try:
        return read_regular_file(str(path), 1 << 20)
    except DumpRejected as exc:
        return exc


_DEV_ZERO_RUN = """
import json, resource, sys
resource.setrlimit(resource.RLIMIT_DATA, (3 << 30, 3 << 30))  # a regression fails here instead of eating the machine
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.ingest.sources import Source
from frlake.session import Frlake
swapped = Source(sys.argv[3], 0, 1, path="/dev/zero")  # a file replaced by a link to /dev/zero after the scan
with Frlake(Settings.resolve(sys.argv[2])) as fl:
    summary = fl.ingest([sys.argv[1]], IngestOptions(workers=1, diagnose=False), sources=[swapped])
print(json.dumps(summary.to_dict()))
"""


@pytest.mark.slow
def test_a_symlink_to_dev_zero_is_refused_before_reading(tmp_path, corpus):
    tree = good_tree(tmp_path / "nfs", corpus)
    (tree / JOB / "attempt-0/gpu-b03/rank_9").symlink_to("/dev/zero")
    lake = tmp_path / "lake"
    swapped = str(tree / JOB / "attempt-0/gpu-c04/rank_8")
    summary = run_python(_DEV_ZERO_RUN, str(tree), str(lake), swapped, timeout=60)
    assert summary["rejected_by_reason"] == {"not_regular_file": 2}
    settings = Settings.resolve(lake)
    assert ingested(settings) == GOOD
    assert rejected(settings) == {str(tree / JOB / "attempt-0/gpu-b03/rank_9"): "not_regular_file",
                                  swapped: "not_regular_file"}


def test_symlink_loops_and_dangling_links_are_recorded_and_links_to_dumps_followed(tmp_path, corpus, fl):
    tree = good_tree(tmp_path / "nfs", corpus)
    attempt = tree / JOB / "attempt-0"
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    shutil.move(attempt / "gpu-c04", outside / "gpu-c04")
    (attempt / "gpu-c04").symlink_to(outside / "gpu-c04")  # a link to a folder: followed
    shutil.move(attempt / "gpu-b03/rank_1", outside / "rank_1")
    (attempt / "gpu-b03/rank_1").symlink_to(outside / "rank_1")  # a link to a dump: followed
    (attempt / "gpu-b03/up").symlink_to("..")  # a loop through a folder above
    (attempt / "gpu-b03/self").symlink_to("self")  # a link to itself
    (attempt / "gpu-b03/rank_7").symlink_to(tmp_path / "gone")  # dangling
    (attempt / "gpu-z99").symlink_to(attempt / "gpu-b03")  # a second way into a folder already read
    settings = fl.settings

    summary = fl.ingest([tree])
    assert ingested(settings) == GOOD
    assert {p.removeprefix(f"{attempt}/"): r for p, r in rejected(settings).items()} == {
        "gpu-b03/up": "symlink_loop", "gpu-b03/self": "symlink_loop", "gpu-b03/rank_7": "dangling_link",
        "gpu-z99": "duplicate_folder"}
    assert summary.rejected == 4
    con = fl.connect()
    assert con.execute("SELECT source_path FROM dumps WHERE rank = 1").fetchone()[0] == str(attempt / "gpu-b03/rank_1")


_AS_ROOT_WITHOUT_DAC = ["setpriv", "--bounding-set", "-dac_override,-dac_read_search"]
_INGEST_RUN = """
import json, sys
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
with Frlake(Settings.resolve(sys.argv[1])) as fl:
    summary = fl.ingest(sys.argv[3:], IngestOptions(workers=int(sys.argv[2]), diagnose=False))
print(json.dumps(summary.to_dict()))
"""


def test_an_unreadable_folder_is_recorded(tmp_path, corpus):
    tree = good_tree(tmp_path / "nfs", corpus)
    locked = tree / JOB / "attempt-0/gpu-d05"
    locked.mkdir()
    shutil.copy(next((corpus / "job-227149").rglob("rank_*")), locked / "rank_0")
    prefix: list[str] = []
    if os.geteuid() == 0:  # root reads any folder: drop the capabilities that let it
        if shutil.which("setpriv") is None or subprocess.run([*_AS_ROOT_WITHOUT_DAC, "true"]).returncode != 0:
            pytest.skip("running as root and cannot drop CAP_DAC_OVERRIDE (no setpriv), so no folder is unreadable")
        prefix = _AS_ROOT_WITHOUT_DAC
    lake = tmp_path / "lake"
    locked.chmod(0)
    try:
        summary = run_python(_INGEST_RUN, str(lake), "1", str(tree), prefix=prefix)
    finally:
        locked.chmod(0o755)
    assert summary["rejected_by_reason"] == {"unreadable_folder": 1}
    settings = Settings.resolve(lake)
    assert ingested(settings) == GOOD
    assert rejected(settings) == {str(locked): "unreadable_folder"}


@pytest.mark.slow
def test_a_missing_or_looping_path_fails_only_itself_and_exit_codes_say_so(tmp_path, corpus):
    tree = good_tree(tmp_path / "nfs", corpus)
    missing, loop = tmp_path / "not-there", tmp_path / "loop"
    loop.symlink_to(loop)
    lake = tmp_path / "lake"
    settings = Settings.resolve(lake)

    first = runner.invoke(app, ["--lake", str(lake), "ingest", str(missing), str(tree), str(loop), "-q"])
    assert first.exit_code == EXIT_SOME_REJECTED, first.output
    assert ingested(settings) == GOOD
    assert rejected(settings) == {str(missing): "not_found", str(loop): "symlink_loop"}

    # a path that is still missing is reported again, beside files left unchanged
    again = runner.invoke(app, ["--lake", str(lake), "ingest", str(tree), str(missing), "-f", "json"])
    assert again.exit_code == EXIT_SOME_REJECTED, again.output
    assert (json.loads(again.stdout)["unchanged"], json.loads(again.stdout)["rejected"]) == (4, 1)

    alone = runner.invoke(app, ["--lake", str(lake), "ingest", str(missing), "-q"])
    assert alone.exit_code == EXIT_ALL_REJECTED, alone.output

    garbage = tmp_path / "garbage" / JOB / "attempt-1/gpu-b03"
    garbage.mkdir(parents=True)
    (garbage / "rank_0").write_bytes(b"\x80\x04not a dump")
    (garbage / "rank_1").write_text("{not json")
    every = runner.invoke(app, ["--lake", str(lake), "ingest", str(tmp_path / "garbage"), "-q"])
    assert every.exit_code == EXIT_ALL_REJECTED, every.output

    clean = runner.invoke(app, ["--lake", str(lake), "ingest", str(tree), "-q"])
    assert clean.exit_code == EXIT_OK, clean.output

    help_text = runner.invoke(app, ["ingest", "--help"]).output
    assert "Exit status: 0 all good; 3 some files were rejected" in " ".join(help_text.split())


class Zeros(io.RawIOBase):
    """``size`` zero bytes, made as they are read (no file on disk)."""

    def __init__(self, size: int):
        self.left = size

    def readable(self) -> bool:
        return True

    def readinto(self, buf) -> int:
        n = min(len(buf), self.left)
        buf[:n] = bytes(n)
        self.left -= n
        return n


def zero_bomb(path: Path, corpus: Path, member_bytes: int, members: int, extra: tuple[int, ...] = ()) -> None:
    """A .tar.gz of a real attempt and ``members`` members of zeros."""
    with tarfile.open(path, "w:gz", compresslevel=1) as tar:
        tar.add(corpus / JOB, arcname=JOB)
        for n, size in enumerate([member_bytes] * members + list(extra)):
            info = tarfile.TarInfo(f"{JOB}/attempt-0/gpu-e0{n}/rank_{10 + n}")
            info.size = size
            tar.addfile(info, io.BufferedReader(Zeros(size)))


_BOMB_RUN = """
import json, resource, sys
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.ingest.sources import ArchiveLimits
from frlake.session import Frlake
settings = Settings.resolve(sys.argv[2])
with Frlake(settings) as fl:
    fl.ingest([sys.argv[3]], IngestOptions(workers=1, isolate=True, diagnose=False))  # warm up: imports, catalog
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
options = IngestOptions(workers=1, isolate=True, diagnose=False, archive=ArchiveLimits(int(sys.argv[4]), int(sys.argv[5])))
with Frlake(settings) as fl:  # a session of its own, opened inside the measurement as before
    summary = fl.ingest([sys.argv[1]], options)
grew = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before
print(json.dumps({"summary": summary.to_dict(), "parent_grew_bytes": grew * 1024}))
"""


@pytest.mark.slow
def test_an_archive_bomb_is_streamed_to_disk_and_the_parent_never_holds_members(tmp_path, corpus):
    member, cap = 64 << 20, 96 << 20
    bomb = tmp_path / "bomb.tar.gz"
    zero_bomb(bomb, corpus, member, 3, extra=(cap + 1,))
    warm = tmp_path / "warm" / "job-227149"
    shutil.copytree(corpus / "job-227149", warm)
    lake = tmp_path / "lake"
    out = run_python(_BOMB_RUN, str(bomb), str(lake), str(warm), str(cap), str(1 << 30), timeout=300)
    summary = out["summary"]
    assert summary["ingested"] == 4
    assert summary["rejected"] == 4
    too_large = [f for f in summary["rejected_files"] if f["reason"] == "too_large"]
    assert [f["path"].rsplit("::", 1)[1] for f in too_large] == [f"{JOB}/attempt-0/gpu-e03/rank_13"]
    # each zero member went to a worker as a file: the parent held at most a copy block of it
    assert out["parent_grew_bytes"] < member // 2, out
    assert not any((lake / ".staging").rglob("member-*"))
    settings = Settings.resolve(lake)
    assert [r for r in ingested(settings) if r[0] == JOB] == GOOD


def test_an_archive_over_its_total_limit_stops_at_the_limit_and_leaves_no_spill(tmp_path, corpus, fl):
    from frlake.ingest.sources import ArchiveLimits

    bomb = tmp_path / "bomb.tar.gz"
    zero_bomb(bomb, corpus, 8 << 20, 6)
    lake = tmp_path / "lake"
    options = IngestOptions(workers=1, diagnose=False, archive=ArchiveLimits(16 << 20, 20 << 20))
    summary = fl.ingest([bomb], options)
    assert summary.ingested == 4  # the real dumps come first in the archive
    assert summary.rejected_by_reason["bad_archive"] == 1
    assert "more than 20,971,520 bytes" in next(f["detail"] for f in summary.rejected_files if f["reason"] == "bad_archive")
    assert summary.rejected_by_reason.get("too_large") is None
    assert not any((lake / ".staging").rglob("member-*"))
