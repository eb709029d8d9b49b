"""Where torch's analyzer gives up: missing dump files, empty pg_config,
wrapped ring buffers, JSON, many groups hanging at once."""

from __future__ import annotations

import json
import pickle
import shutil
import sys

import pytest

from frlake.config import Settings
from tests.helpers import ROOT, diagnose, ingest, load_trusted

sys.path.insert(0, str(ROOT / "bench"))
from synth import write_job  # noqa: E402


def _diagnose_tree(tmp_path, tree, job):
    settings = Settings.resolve(tmp_path / "lake")
    summary = ingest([tree], settings)
    assert summary.rejected == 0, summary.rejected_files
    return diagnose(settings, job, 0, store=False)


@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_wrapped_buffers_and_a_missing_collective(tmp_path, fmt):
    truth = write_job(tmp_path / "nfs", 32, 300, job="wrap", fault="missing_last", culprit=13, seed=3, fmt=fmt,
                      ranks_per_host=4, procs=1)
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", "wrap")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.host, d.root.reason) == (13, truth["culprit_host"], "missing")
    assert d.root.seq == truth["hang"]["collective_seq_id"]


def test_a_rank_without_a_dump_is_named(tmp_path):
    truth = write_job(tmp_path / "nfs", 16, 200, job="crash", fault="missing_last", culprit=6, seed=1,
                      ranks_per_host=4, procs=1)
    victim_file = next((tmp_path / "nfs").rglob("rank_6"))
    victim_file.unlink()  # it crashed before it could dump
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", "crash")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.reason) == (6, "no_dump")
    assert d.root.host == truth["culprit_host"]  # inferred from its block of ranks on that host
    assert d.ranks_missing_dump == [6]


def test_straggler_in_a_synthetic_job(tmp_path):
    truth = write_job(tmp_path / "nfs", 16, 400, job="slow", fault="straggler", culprit=9, seed=2,
                      ranks_per_host=4, procs=1)
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", "slow")
    assert d.verdict == "straggler"
    assert (d.root.rank, d.root.host) == (9, truth["culprit_host"])
    assert 15 < d.root.lateness_ms < 60


def test_healthy_synthetic_job(tmp_path):
    write_job(tmp_path / "nfs", 16, 300, job="fine", seed=4, ranks_per_host=4, procs=1)
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", "fine")
    assert (d.verdict, d.culprits) == ("healthy", [])


@pytest.mark.parametrize("job, attempt, culprit", [("job-223715", 0, 1), ("job-5f5228", 1, 0), ("job-24fdd5", 1, 0)])
def test_empty_pg_config_membership_is_inferred(tmp_path, corpus, job, attempt, culprit):
    tree = tmp_path / "nfs" / job
    shutil.copytree(corpus / job / f"attempt-{attempt}", tree / "attempt-0")
    for path in tree.rglob("rank_*"):
        dump = load_trusted(path)
        dump["pg_config"] = {}  # as the gloo backend writes it
        if path.suffix == ".json":
            path.write_text(json.dumps(dump))
        else:
            path.write_bytes(pickle.dumps(dump))
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", job)
    assert d.verdict in ("hang", "mismatch")
    assert d.root.rank == culprit


def test_record_ids_that_restart_after_a_reset(tmp_path):
    """After the recorder is reset its record ids start again at 0 while sequence ids go on; such a
    rank looks like a short buffer, never like a wrapped one, and nothing of it is taken as missing."""
    truth = write_job(tmp_path / "nfs", 16, 400, job="reset", fault="missing_last", culprit=6, seed=8,
                      ranks_per_host=4, procs=1)
    for rank, keep in ((3, 150), (11, 90)):
        path = next((tmp_path / "nfs").rglob(f"rank_{rank}"))
        dump = load_trusted(path)
        dump["entries"] = dump["entries"][-keep:]
        for i, entry in enumerate(dump["entries"]):
            entry["record_id"] = i
        path.write_bytes(pickle.dumps(dump))
    d = _diagnose_tree(tmp_path, tmp_path / "nfs", "reset")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.host, d.root.reason) == (6, truth["culprit_host"], "missing")
    assert {c.rank for c in d.culprits if c.role == "root"} == {6}
