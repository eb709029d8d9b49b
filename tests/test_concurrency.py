"""Three `frlake ingest` processes over overlapping trees into one lake, on
a team catalog (PostgreSQL) and on SQLite, while a server answers queries:
no duplicate rows, no lost files, no errors."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.session import Frlake
from frlake.storage.files import LakeFiles
from tests.helpers import assert_outside_readers_see_only_committed, snapshot

pytestmark = pytest.mark.slow

ENV = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parent.parent)}
JOBS = ["job-f70c5d", "job-65a28c", "job-223715", "job-5f5228", "job-e211c0", "job-e79e4a"]


def test_three_ingests_over_overlapping_trees_while_a_server_reads(tmp_path, corpus, any_db, views):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    nfs = tmp_path / "nfs"
    for job in JOBS:
        shutil.copytree(corpus / job, nfs / job)
    # overlapping trees: each process is given a different, overlapping part of the same files
    trees = [[nfs / j for j in JOBS[:4]], [nfs / j for j in JOBS[2:]], [nfs]]
    settings = any_db
    with Frlake(settings) as fl:
        fl.ingest([nfs / JOBS[0] / "attempt-0"])  # the catalog exists before the server opens it
    app = create_app(ServerConfig(settings))
    errors: list[str] = []
    stop = threading.Event()

    def read() -> None:
        with app.test_client() as client:
            while not stop.is_set():
                for url in ("/api/jobs", "/", "/api/reports/flaky-hosts"):
                    r = client.get(url)
                    if r.status_code != 200:
                        errors.append(f"{url}: {r.status_code} {r.get_data(as_text=True)[:200]}")
                r = client.post("/api/query", json={"sql": "SELECT count(*) FROM dumps"},
                                headers={"Origin": "http://localhost"})
                if r.status_code != 200:
                    errors.append(f"query: {r.status_code} {r.get_data(as_text=True)[:200]}")

    readers = [threading.Thread(target=read) for _ in range(2)]
    for t in readers:
        t.start()
    try:
        procs = [subprocess.Popen([sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "--db-url",
                                   settings.db_url, "ingest", *map(str, tree), "--workers", "1", "--batch-files", "3",
                                   "--quiet"], env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for tree in trees]
        outputs = [p.communicate(timeout=600) for p in procs]
    finally:
        stop.set()
        for t in readers:
            t.join()
    for p, (out, err) in zip(procs, outputs, strict=True):
        assert p.returncode == 0, (out, err)
    assert errors == []
    assert_outside_readers_see_only_committed(settings)
    con = views(settings.lake, settings.db_url)
    n_files = sum(1 for p in nfs.rglob("*") if p.is_file())
    assert con.execute("SELECT count(*), count(DISTINCT (sha256, job, attempt)) FROM dumps").fetchone() == (n_files, n_files)
    assert con.execute("SELECT count(*) FROM files").fetchone()[0] == n_files
    assert con.execute("SELECT count(*) FROM (SELECT path FROM files GROUP BY path HAVING count(*) > 1)").fetchone()[0] == 0
    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        assert LakeFiles(fl.catalog).pending() == [] and fl.catalog.diagnoses.pending() == []
        assert {s for f in fl.catalog.files.records() for s in [f.status]} <= {"ingested", "duplicate"}
    clean = Settings.resolve(tmp_path / "clean")
    with Frlake(clean) as fl:
        fl.ingest([nfs])
    got, want = snapshot(settings), snapshot(clean)
    for table in ("entries", "dumps", "groups", "pg_status", "stacks"):
        assert got[table] == want[table], table
