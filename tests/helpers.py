"""Paths and small helpers the tests share (conftest.py holds the fixtures)."""

from __future__ import annotations

import json
import pickle
import shutil
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


# One-call forms of the session's methods, each with a session of its own
# (the product's Python API is frlake.Frlake; see README).
def ingest(paths, settings, options=None, progress=None, **kwargs):
    from frlake.session import Frlake

    with Frlake(settings) as session:
        return session.ingest(paths, options, progress, **kwargs)


def diagnose(settings, job, attempt=None, *, store=True):
    from frlake.session import Frlake

    with Frlake(settings) as session:
        return session.diagnose(job, attempt, store=store)


def diagnose_many(settings, job=None):
    from frlake.session import Frlake

    with Frlake(settings) as session:
        return session.rediagnose(job)


def query(sql, settings, limits=None):
    from frlake.session import Frlake

    with Frlake(settings) as session:
        return session.query(sql, limits)


def run_report(settings, name, window=None, limit=None):
    from frlake.session import Frlake

    with Frlake(settings) as session:
        return session.report(name, window, limit)


def open_sandbox(lake, db_url=None, limits=None):
    """A sandbox that outlives its session (the views hold what they read)."""
    from frlake.session import Frlake

    with Frlake.open(lake, db_url) as session:
        return session.sandbox(limits)
