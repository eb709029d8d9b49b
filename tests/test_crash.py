"""kill -9 an ingest at random moments: the lake stays consistent and a
re-run ends with exactly the tables of a clean ingest."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
from frlake.storage.files import LakeFiles
from tests.helpers import assert_outside_readers_see_only_committed, snapshot, visible_parquet

pytestmark = pytest.mark.slow  # the whole module: see README, "Tests"


def lake_is_consistent(settings: Settings) -> None:
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        files = LakeFiles(fl.catalog)
        committed = {f.path for f in files.committed()}
        assert files.pending() == [] and files.publishing() == []
    assert visible_parquet(settings) == committed, "every Parquet file an outside reader sees is committed, and only those"


def _kill_twice_then_finish(cmd: list[str], settings, rng: random.Random, after_s: tuple[float, float]) -> None:
    """Run ``cmd``, kill its process group with SIGKILL at a random moment twice (outside readers see committed
    files only after each), then let a third run finish: it succeeds and leaves the lake consistent."""
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    for _ in range(2):
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(*after_s))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
        assert_outside_readers_see_only_committed(settings)
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lake_is_consistent(settings)


@pytest.fixture(scope="module")
def clean(tmp_path_factory, corpus):
    settings = Settings.resolve(tmp_path_factory.mktemp("clean"))
    with Frlake(settings) as fl:
        fl.ingest([corpus], IngestOptions(chunk_files=4))
    return snapshot(settings)


@pytest.mark.parametrize("trial", range(6))
def test_kill_at_random_moment_then_rerun(tmp_path, corpus, clean, trial):
    rng = random.Random(trial)
    settings = Settings.resolve(tmp_path / "lake")
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "ingest", str(corpus),
           "--batch-files", "4", "--workers", str(1 + trial % 2), "--quiet"]
    _kill_twice_then_finish(cmd, settings, rng, (0.4, 2.2))
    assert snapshot(settings) == clean
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        assert fl.catalog.diagnoses.pending() == [], "whatever was committed is diagnosed"


@pytest.fixture(scope="module")
def timed_lake(tmp_path_factory):
    """Twelve timed attempts (tests/fleet.py), so that a diagnosis writes summary tables."""
    from datetime import UTC, datetime, timedelta

    from tests.fleet import slow_link_attempt, write_timed

    root = tmp_path_factory.mktemp("timed-crash")
    start = datetime(2026, 11, 2, tzinfo=UTC)
    attempts = [slow_link_attempt(f"job-{j}", n, [(k + j + n) % 8 for k in range(8)], start + timedelta(hours=j * 3 + n))
                for j in range(4) for n in range(3)]
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as fl:
        assert fl.ingest([write_timed(root / "nfs", attempts)]).ingested == 192
    return settings, snapshot(settings)


@pytest.mark.parametrize("trial", range(3))
def test_kill_a_diagnosis_while_it_writes_summaries_then_rerun(tmp_path, timed_lake, trial):
    """frlake rediagnose publishes every attempt's summary tables with its diagnosis: killed at any moment,
    outside readers see committed files only, and the next run ends with the tables of a clean one."""
    import shutil

    source, clean_tables = timed_lake
    settings = Settings.resolve(tmp_path / "lake")
    shutil.copytree(source.lake, settings.lake)
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "rediagnose"]
    _kill_twice_then_finish(cmd, settings, random.Random(trial), (1.0, 6.0))  # a rediagnose of the twelve: seconds
    assert snapshot(settings) == clean_tables
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        assert fl.catalog.diagnoses.pending() == []
        assert {f.table for f in LakeFiles(fl.catalog).committed()} >= {"collective_durations", "watchdog_lags"}
