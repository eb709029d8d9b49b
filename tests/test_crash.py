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

import frlake
from frlake.catalog.store import Catalog
from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.schema import TABLES
from tests.helpers import ingest

pytestmark = pytest.mark.slow  # the whole module: see README, "Tests"


VOLATILE = {"run_id", "ingested_at"}


def snapshot(settings: Settings) -> dict[str, list]:
    con = frlake.connect(settings.lake, settings.db_url)
    out = {}
    for name, schema in TABLES.items():
        cols = [f.name for f in schema if f.name not in VOLATILE]
        if name != "stacks":
            cols += ["job", "attempt"]
        rows = con.execute(f"SELECT {', '.join(cols)} FROM {name}").fetchall()
        out[name] = sorted(map(repr, rows))
    out["catalog_files"] = sorted(
        (f.path, f.status, f.sha256) for f in Catalog(settings.db_url).files()
    )
    return out


def lake_is_consistent(settings: Settings) -> None:
    catalog = Catalog(settings.db_url)
    committed = set()
    for table in TABLES:
        committed.update(catalog.lake_files(table))
    on_disk = {p.relative_to(settings.lake).as_posix() for p in (settings.lake / "tables").rglob("*") if p.is_file()}
    assert catalog.pending_lake_files() == []
    assert on_disk == committed, "every Parquet file under tables/ is committed, and only those"
    catalog.close()


@pytest.fixture(scope="module")
def clean(tmp_path_factory, corpus):
    settings = Settings.resolve(tmp_path_factory.mktemp("clean"))
    ingest([corpus], settings, IngestOptions(chunk_files=4))
    return snapshot(settings)


@pytest.mark.parametrize("trial", range(6))
def test_kill_at_random_moment_then_rerun(tmp_path, corpus, clean, trial):
    rng = random.Random(trial)
    settings = Settings.resolve(tmp_path / "lake")
    cmd = [sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "ingest", str(corpus),
           "--batch-files", "4", "--workers", str(1 + trial % 2), "--quiet"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
    kills = 0
    for _ in range(2):  # kill it twice at different moments, then let it finish
        proc = subprocess.Popen(cmd, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                start_new_session=True)
        time.sleep(rng.uniform(0.4, 2.2))
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            kills += 1
        proc.wait()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    lake_is_consistent(settings)
    assert snapshot(settings) == clean
    assert Catalog(settings.db_url).pending_diagnoses() == [], "whatever was committed is diagnosed"
