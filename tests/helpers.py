"""Paths and small helpers the tests share (conftest.py holds the fixtures)."""

from __future__ import annotations

import json
import os
import pickle
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CORPUS = ROOT / "tests" / "corpus" / "visible"  # a copy of the shared corpus, kept in the repository
TRUTH = ROOT / "tests" / "corpus" / "visible_truth.json"
FIXTURES = ROOT / "tests" / "fixtures"


def load_trusted(path: Path):
    """Read a dump we made or PyTorch wrote, for expected values in tests only."""
    data = path.read_bytes()
    if data[:1] == b"{":
        return json.loads(data)
    return pickle.loads(data)  # trusted test input, never product code


def copy_tree(src: Path, dst: Path) -> Path:
    shutil.copytree(src, dst)
    return dst


# What a lake holds, to compare two lakes (tests of crashes, forget, compaction).
VOLATILE = {"run_id", "ingested_at"}


def snapshot(settings) -> dict[str, list]:
    """Every row of every lake table (without the columns a run stamps), and
    the catalog's file records, sorted."""
    from frlake.schema import TABLES
    from frlake.session import Frlake

    out = {}
    with Frlake(settings, must_exist=True) as session:
        con = session.connect()
        for name, table_schema in TABLES.items():
            cols = [f.name for f in table_schema if f.name not in VOLATILE]
            if name != "stacks":
                cols += ["job", "attempt"]
            rows = con.execute(f"SELECT {', '.join(cols)} FROM {name}").fetchall()
            out[name] = sorted(map(repr, rows))
        out["catalog_files"] = sorted((f.path, f.status, f.sha256) for f in session.files())
    return out


def visible_parquet(settings) -> set[str]:
    """The Parquet files an outside reader globbing tables/**/*.parquet sees (relative to the lake)."""
    return {p.relative_to(settings.lake).as_posix() for p in (settings.lake / "tables").rglob("*.parquet")
            if not p.name.startswith((".", "_"))}


def assert_outside_readers_see_only_committed(settings) -> None:
    """At any moment: every Parquet file at its final name is committed in the catalog, or retired."""
    from sqlalchemy import create_engine, inspect, text

    if settings.db_url.startswith("sqlite") and not Path(settings.db_url.split("///", 1)[-1]).exists():
        assert visible_parquet(settings) == set() if (settings.lake / "tables").exists() else True
        return
    engine = create_engine(settings.db_url.replace("postgresql://", "postgresql+psycopg://"))
    if "retired_files" not in inspect(engine).get_table_names():
        engine.dispose()
        assert not (settings.lake / "tables").exists() or visible_parquet(settings) == set()
        return
    with engine.connect() as conn:
        known = {r[0] for r in conn.execute(text("SELECT path FROM lake_files WHERE status IN "
                                                 "('publishing', 'committed')"))}
        known |= {r[0] for r in conn.execute(text("SELECT path FROM retired_files"))}
    engine.dispose()
    assert visible_parquet(settings) <= known, "a Parquet file that is not committed is visible under tables/"


def assert_lake_is_clean(settings) -> None:
    """Nothing pending, nothing retired left, and exactly the committed files on disk."""
    from frlake.session import Frlake
    from frlake.storage.files import LakeFiles
    from frlake.storage.lake import hidden_path

    with Frlake.open(settings.lake, settings.db_url, must_exist=True) as fl:
        records = LakeFiles(fl.catalog)
        files = records.committed()
        committed = {f.path for f in files} | {hidden_path(f.path) for f in files if f.hidden}
        assert records.pending() == []
        assert records.publishing() == []
        assert records.retired_count() == 0
    on_disk = {p.relative_to(settings.lake).as_posix() for p in (settings.lake / "tables").rglob("*") if p.is_file()}
    assert on_disk == committed, "every file under tables/ is committed (at its final and hidden names), and only those"


CORPUS = ROOT / "tests" / "corpus" / "visible"


def copy_attempt(dst: Path, job: str, attempt: int, ranks: list[str] | None = None) -> Path:
    """A corpus attempt's files (only ``ranks``' file names, when given) under ``dst``, as the corpus lays
    them out; returns ``dst``."""
    src = CORPUS / job / f"attempt-{attempt}"
    for f in sorted(src.rglob("*")):
        if f.is_file() and (ranks is None or f.name in ranks):
            target = dst / job / f"attempt-{attempt}" / f.relative_to(src)
            target.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy(f, target)
    return dst



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def serve(lake: Path, *args: str, source: Path = ROOT) -> tuple[str, subprocess.Popen]:
    """A real ``frlake serve`` over ``lake`` (with ``args``) on a free port, once it answers: its URL and its
    process (the caller terminates it). ``source``: the frlake tree it runs (bench/bench_pages.py: another
    commit's)."""
    import pytest

    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "frlake.cli.main", "--lake", str(lake), "serve", "--port", str(port), *args],
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=source,
        env={**os.environ, "PYTHONPATH": str(source)} if source != ROOT else None,
    )
    url = f"http://127.0.0.1:{port}"
    for _ in range(150):
        try:
            urllib.request.urlopen(url + "/api/health", timeout=1)
            return url, proc
        except OSError:
            time.sleep(0.1)
    proc.kill()
    pytest.fail("frlake serve did not start: " + proc.stdout.read().decode())
