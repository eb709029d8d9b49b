"""kill -9 a forget or a compaction at random moments, on SQLite and on
PostgreSQL: at every kill the lake is consistent (outside readers see only
committed files, frlake's views see each attempt whole), and a re-run ends
with exactly the tables of a clean run and no stray file."""

from __future__ import annotations

import os
import random
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
from tests.helpers import assert_lake_is_clean, assert_outside_readers_see_only_committed, snapshot

pytestmark = pytest.mark.slow

JOBS = ("job-f70c5d", "job-65a28c", "job-223715", "job-5f5228")
HOST = "job-f70c5d/attempt-0/gpu-a02"
ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}


def _tree(tmp_path: Path, corpus: Path) -> Path:
    tree = tmp_path / "nfs"
    for job in JOBS:
        shutil.copytree(corpus / job, tree / job)
    return tree


def _files_but(tree: Path, gone: str) -> list[Path]:
    """Every file of the tree but those under ``gone`` (same paths, same mtimes)."""
    return sorted(p for p in tree.rglob("*") if p.is_file() and not p.is_relative_to(tree / gone))


def _attempts_whole(settings: Settings) -> None:
    """frlake's views show every attempt with all its dumps or not at all."""
    with Frlake(settings, must_exist=True) as session:
        con = session.connect()
        expected = dict(((j, a), n) for j, a, n in con.execute("SELECT job, attempt, n_dumps FROM attempts").fetchall())
        seen = dict(((j, a), n) for j, a, n in con.execute("SELECT job, attempt, count(*) FROM dumps GROUP BY ALL").fetchall())
        entries = {(j, a) for j, a in con.execute("SELECT DISTINCT job, attempt FROM entries").fetchall()}
    assert seen == expected
    assert entries == set(expected)


def _tables(snap: dict) -> dict:
    return {k: v for k, v in snap.items() if k != "catalog_files"}


@pytest.mark.parametrize("trial", range(2))
@pytest.mark.parametrize("operation", ["forget-job", "forget-path", "compact"])
def test_kill_a_lifecycle_command_then_rerun(tmp_path, corpus, any_db, operation, trial):
    rng = random.Random(f"{operation}-{trial}")
    tree = _tree(tmp_path, corpus)
    settings = any_db
    with Frlake(settings) as fl:
        fl.ingest([tree], IngestOptions(chunk_files=1, compact_min_files=None, workers=2))
    if operation == "compact":
        expected = _tables(snapshot(settings))
        args = ["compact", "--grace", "0s"]
    else:
        gone = "job-f70c5d" if operation == "forget-job" else HOST
        clean = Settings.resolve(tmp_path / "clean")
        with Frlake(clean) as fl:
            fl.ingest(_files_but(tree, gone))
        expected = _tables(snapshot(clean))
        args = (["forget", "--job", "job-f70c5d"] if operation == "forget-job"
                else ["forget", "--path", str(tree / HOST)]) + ["--grace", "0s"]
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "--db-url", settings.db_url,
           *args, "--quiet"]
    for _ in range(3):
        proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(1.0, 4.0))  # the command starts in about 2 s on a shared machine, then runs 0.5-1.5 s
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert_outside_readers_see_only_committed(settings)
        _attempts_whole(settings)
    done = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    # a second run finds nothing left to do and sweeps what the killed ones retired
    again = subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=300)
    assert again.returncode == 0, again.stderr
    assert _tables(snapshot(settings)) == expected
    assert_lake_is_clean(settings)
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        assert fl.catalog.diagnoses.pending() == []
