"""A watch that costs what changed: folder cursors (frlake.ingest.changes) find new and changed dumps
without listing unchanged folders, the watcher ingests only them, and an attempt settles (every rank
dumped, or its quiet period) before it is diagnosed as complete. Real folders, a real lake."""

from __future__ import annotations

import os
import shutil
import time
from pathlib import Path

from frlake.config import Settings
from frlake.ingest import changes as changes_module
from frlake.ingest.changes import Changes
from frlake.session import Frlake
from tests.helpers import copy_attempt as _copy

HOUR_AGO = time.time() - 3600


def _old(path: Path) -> None:
    """Files as a tree that has stood for an hour holds them (their folders' times are left as they are)."""
    for p in path.rglob("*"):
        if p.is_file():
            os.utime(p, (HOUR_AGO, HOUR_AGO))


def _tree(root: Path, jobs: int = 3, hosts: int = 2, ranks: int = 2) -> list[Path]:
    files = []
    for j in range(jobs):
        for h in range(hosts):
            folder = root / f"job-{j}" / "attempt-0" / f"h{h}"
            folder.mkdir(parents=True)
            for r in range(ranks):
                (folder / f"rank_{h * ranks + r}").write_bytes(b"x" * (r + 1))
                files.append(folder / f"rank_{h * ranks + r}")
    _old(root)
    return files


def test_the_first_look_finds_every_file_and_an_unchanged_tree_lists_no_folder(tmp_path):
    files = _tree(tmp_path / "nfs")
    changes = Changes([str(tmp_path / "nfs")])
    first = changes.look()
    assert sorted(first.files) == sorted(str(f) for f in files)
    again = changes.look()
    assert again.files == [] and again.folders_listed == 0
    assert again.folders_statted == 1 + 3 + 3 + 6  # the root, the jobs, the attempts, the hosts


def test_a_dump_written_to_a_temporary_name_and_renamed_is_found_once(tmp_path):
    _tree(tmp_path / "nfs")
    changes = Changes([str(tmp_path / "nfs")])
    changes.look()
    folder = tmp_path / "nfs" / "job-1" / "attempt-0" / "h0"
    (folder / ".rank_9.tmp").write_bytes(b"new dump")
    os.utime(folder / ".rank_9.tmp", (HOUR_AGO, HOUR_AGO))
    assert changes.look().files == []  # a hidden temporary file is never handed over
    os.rename(folder / ".rank_9.tmp", folder / "rank_9")
    look = changes.look()
    assert look.files == [str(folder / "rank_9")] and look.folders_listed == 1
    assert changes.look().files == []


def test_a_file_written_in_place_is_held_back_while_young_and_found_when_quiet(tmp_path, monkeypatch):
    _tree(tmp_path / "nfs")
    changes = Changes([str(tmp_path / "nfs")])
    changes.look()
    folder = tmp_path / "nfs" / "job-2" / "attempt-0" / "h1"
    (folder / "rank_7").write_bytes(b"half a dump")  # just now: it may be half written
    assert changes.look().files == []
    monkeypatch.setattr(changes_module, "QUIET_S", 0.0)
    assert changes.look().files == [str(folder / "rank_7")]
    # written again in place: its folder's time does not move, but the folder is warm (a file moved lately)
    (folder / "rank_7").write_bytes(b"the whole dump, longer")
    assert changes.look().files == [str(folder / "rank_7")]


def test_an_old_file_rewritten_in_place_is_found_through_its_event(tmp_path):
    files = _tree(tmp_path / "nfs")
    changes = Changes([str(tmp_path / "nfs")])
    changes.look()
    target = files[0]
    target.write_bytes(b"rewritten")
    os.utime(target, (HOUR_AGO + 60, HOUR_AGO + 60))
    assert changes.look().files == []  # a cold folder whose time did not move: not listed
    changes.touch(str(target))  # what inotify tells the watcher
    assert changes.look().files == [str(target)]


def test_a_removed_folder_is_forgotten_and_a_new_one_read_whole(tmp_path):
    _tree(tmp_path / "nfs")
    changes = Changes([str(tmp_path / "nfs")])
    changes.look()
    before = changes.folders
    shutil.rmtree(tmp_path / "nfs" / "job-0")
    assert changes.look().files == [] and changes.folders == before - 4
    new = tmp_path / "nfs" / "job-9" / "attempt-3" / "h0"
    new.mkdir(parents=True)
    (new / "rank_0").write_bytes(b"d")
    os.utime(new / "rank_0", (HOUR_AGO, HOUR_AGO))
    assert changes.look().files == [str(new / "rank_0")]


def test_the_lake_inside_a_watched_tree_is_never_entered(tmp_path):
    _tree(tmp_path / "nfs")
    (tmp_path / "nfs" / "lake" / "tables").mkdir(parents=True)
    (tmp_path / "nfs" / "lake" / "tables" / "x.parquet").write_bytes(b"p")
    changes = Changes([str(tmp_path / "nfs")], exclude=str(tmp_path / "nfs" / "lake"))
    assert not [f for f in changes.look().files if "/lake/" in f]




def _until(check, seconds: float = 60.0):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        found = check()
        if found:
            return found
        time.sleep(0.05)
    raise AssertionError("not within the time allowed")


def test_a_watch_ingests_what_its_looks_find_and_settles_an_attempt_after_its_quiet_period(tmp_path, monkeypatch):
    from frlake.ingest.pipeline import IngestOptions
    from frlake.server.watch import Watcher, watch_config

    monkeypatch.setattr(changes_module, "QUIET_S", 0.0)
    nfs = tmp_path / "nfs"
    _copy(nfs, "job-e79e4a", 0)  # healthy, whole
    with Frlake(Settings.resolve(tmp_path / "lake")) as fl:
        config = watch_config([str(nfs)], 3600, IngestOptions(workers=1), poll_s=0.1, settle_s=1.0, inotify=False)
        watcher = Watcher(fl, config).start()
        try:
            _until(lambda: watcher.status().full_scans == 1 and watcher.status().looks >= 2)
            healthy = watcher.status().total_ingested
            assert healthy == len([p for p in nfs.rglob("*") if p.is_file()])
            # a new attempt lands, three of its four ranks: found by a look, not by a full scan
            _copy(nfs, "job-223715", 0, ["rank_0", "rank_1", "rank_2"])
            _until(lambda: watcher.status().total_ingested == healthy + 3)
            assert watcher.status().full_scans == 1
            waiting = fl.catalog.diagnoses.get("job-223715", 0)
            assert not waiting.complete and waiting.ranks_missing_dump == [3]
            # no dump of it for the quiet period: diagnosed as complete, with the dumps there are
            _until(lambda: watcher.status().settled == 1)
            assert fl.catalog.diagnoses.get("job-223715", 0).complete
            assert watcher.status().waiting == 0
            # an unchanged tree: each look stats its folders and lists none (once its files are older than
            # WARM_S: a folder with a file moved lately is listed at every look)
            _old(nfs)
            _until(lambda: (watcher.status().last_look or {}).get("folders_listed") == 0)
        finally:
            watcher.stop(10)
        assert not watcher._thread.is_alive()


def test_an_attempt_whose_every_rank_dumped_is_settled_without_waiting(tmp_path, monkeypatch):
    from frlake.ingest.pipeline import IngestOptions
    from frlake.server.watch import Watcher, watch_config

    monkeypatch.setattr(changes_module, "QUIET_S", 0.0)
    nfs = tmp_path / "nfs"
    nfs.mkdir()
    with Frlake(Settings.resolve(tmp_path / "lake")) as fl:
        config = watch_config([str(nfs)], 3600, IngestOptions(workers=1), poll_s=0.1, settle_s=3600, inotify=False)
        watcher = Watcher(fl, config).start()
        try:
            _until(lambda: watcher.status().full_scans == 1)
            _copy(nfs, "job-223715", 0)
            _until(lambda: watcher.status().total_ingested == 4)
            d = fl.catalog.diagnoses.get("job-223715", 0)
            assert (d.verdict.value, d.culprits[0].rank, d.ranks_missing_dump) == ("hang", 1, [])
            _until(lambda: watcher.status().waiting == 0)
            assert watcher.status().settled == 0  # nothing to wait for: it settled when its last dump came
        finally:
            watcher.stop(10)


def test_a_local_write_wakes_the_watch_through_inotify(tmp_path):
    from frlake.ingest.pipeline import IngestOptions
    from frlake.server.watch import Watcher, watch_config

    nfs = tmp_path / "nfs"
    nfs.mkdir()
    with Frlake(Settings.resolve(tmp_path / "lake")) as fl:
        # a look only every 10 minutes: what it ingests, inotify woke it for
        config = watch_config([str(nfs)], 3600, IngestOptions(workers=1), poll_s=600, settle_s=3600)
        watcher = Watcher(fl, config).start()
        try:
            _until(lambda: watcher.status().full_scans == 1 and watcher.status().inotify == "on")
            time.sleep(0.5)  # the watch table is set up
            _copy(nfs, "job-223715", 0)
            _until(lambda: watcher.status().total_ingested == 4, 30)
        finally:
            watcher.stop(10)
