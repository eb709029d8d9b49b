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
