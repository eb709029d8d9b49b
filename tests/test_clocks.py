"""Hosts whose clocks disagree: genuine gloo dumps (tests/fixtures/genuine and the other torch releases' sets)
with one host's timestamps, or every host's, moved as a clock that reads ahead or behind would write them.
The straggler is still found, with the offset shown; healthy jobs stay healthy; hangs stay hangs."""

from __future__ import annotations

import json
import pickle
import random
import shutil
from pathlib import Path

import pytest

from frlake.diagnose import clocks
from frlake.ingest import IngestOptions
from tests.helpers import FIXTURES

GENUINE = FIXTURES / "genuine"
TIMES = ("time_created_ns", "time_discovered_started_ns", "time_discovered_completed_ns")
STRAGGLER = GENUINE / "straggler" / "straggler" / "attempt-0"  # rank 5 (host-c) sleeps 0.3 s before each step
HEALTHY = GENUINE / "mesh_healthy_jitter" / "mesh-healthy-0" / "attempt-0"
HANG = GENUINE / "dead_rank" / "dead-rank" / "attempt-0"  # rank 3 (host-b) dies: a hang


def _skewed(src: Path, dst: Path, offsets: dict[str, float]) -> Path:
    """``src``'s host folders copied to ``dst``, each host's entries' times moved by its offset (seconds)."""
    shutil.copytree(src, dst)
    for host, seconds in offsets.items():
        for path in (dst / host).iterdir():
            is_json = path.name.endswith(".json")
            dump = json.loads(path.read_text()) if is_json else pickle.loads(path.read_bytes())  # our own fixture
            for entry in dump.get("entries", []):
                for key in TIMES:
                    if entry.get(key):
                        entry[key] += round(seconds * 1e9)
            if is_json:
                path.write_text(json.dumps(dump))
            else:
                path.write_bytes(pickle.dumps(dump))
    return dst


@pytest.mark.parametrize("host", ["host-a", "host-c"])  # another host, and the straggler's own
@pytest.mark.parametrize("seconds", [1.5, -1.5])
def test_a_straggler_is_found_with_one_host_off(tmp_path, fl, host, seconds):
    _skewed(STRAGGLER, tmp_path / "nfs" / "slow" / "attempt-0", {host: seconds})
    fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1))
    d = fl.diagnose("slow", 0)
    assert (d.verdict, d.root.rank, d.root.host) == ("straggler", 5, "host-c")
    # the skewed host's estimate, against the others', with its spread and the bounds causality gives
    (shown,) = d.clocks["corrected"]
    assert shown["host"] == host and shown["ranks"] == sorted(shown["ranks"])
    # the others' clocks agree to a few ms: the median host's is the attempt's, so one of four off by s
    # reads s off; the estimate is within 5 ms of it
    assert abs(shown["offset_ms"] - seconds * 1000) < 5
    assert shown["corrected_ms"] == shown["offset_ms"] and 0 <= shown["spread_ms"] < 5
    assert shown["lo_ms"] <= shown["offset_ms"] <= shown["hi_ms"]
    assert d.clocks["basis"] == "next call"  # gloo's collectives block: a rank's next call follows completion
    assert 295 < d.root.lateness_ms < 320  # its own 0.3 s sleep, not the clock's 1.5 s


def test_without_the_correction_the_skew_hides_the_straggler(tmp_path, fl, monkeypatch):
    """The same dumps, the correction off: what frlake said before (healthy) — so the test above can fail."""
    from frlake.diagnose import straggler

    _skewed(STRAGGLER, tmp_path / "nfs" / "slow" / "attempt-0", {"host-a": -1.5})
    fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1))
    monkeypatch.setattr(straggler, "CORRECT_CLOCKS", False)
    assert fl.diagnose("slow", 0, store=False).verdict == "healthy"


@pytest.mark.parametrize("seed", range(3))
def test_every_host_off_by_up_to_two_seconds(tmp_path, fl, seed):
    """Every host's clock off at random (up to 2 s either way): the straggler found, the healthy job healthy,
    the hang a hang with its root."""
    rng = random.Random(seed)
    for job, src in (("slow", STRAGGLER), ("fine", HEALTHY), ("dead", HANG)):
        hosts = sorted(p.name for p in src.iterdir() if p.is_dir())
        _skewed(src, tmp_path / "nfs" / job / "attempt-0", {h: rng.uniform(-2, 2) for h in hosts})
    fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1))
    slow = fl.diagnose("slow", 0)
    assert (slow.verdict, slow.root.rank) == ("straggler", 5)
    assert fl.diagnose("fine", 0).verdict == "healthy"
    dead = fl.diagnose("dead", 0)
    assert dead.verdict == "hang" and dead.root.rank == 3


def test_agreeing_clocks_are_left_as_they_are(tmp_path, fl):
    """Unskewed dumps: no clock is corrected, the largest estimate is a few ms and shown as such."""
    shutil.copytree(STRAGGLER, tmp_path / "nfs" / "slow" / "attempt-0")
    fl.ingest([tmp_path / "nfs"], IngestOptions(workers=1))
    d = fl.diagnose("slow", 0)
    assert d.clocks["corrected"] == [] and d.clocks["domains"] == 4
    assert abs(d.clocks["largest"]["offset_ms"]) < 5 and d.clocks["largest"]["corrected_ms"] == 0


def test_a_slow_host_is_not_taken_for_a_clock(tmp_path, fl):
    """Both ranks of a host late to every collective, the others waiting for them: causality cannot tell it
    from a clock, so nothing is corrected and the lateness stays (the straggler is one of its ranks)."""
    import numpy as np

    # two domains of two ranks: host-x's ranks arrive 50 ms after host-y's, and everyone's next call comes
    # 1 ms after host-x's arrival (they waited for it)
    dom = np.array([0, 1] * 20)
    inst = np.repeat(np.arange(20), 2)
    base = np.repeat(np.arange(20) * 100e6, 2)
    last = base + np.where(dom == 0, 50e6, 0)
    done = base + 51e6
    aligned, _ = clocks._align(dom, inst, done, np.ones(40, bool), 2)
    lo, hi, count, last_share = clocks._bounds(dom, inst, last, done, np.ones(40, bool), aligned, 2)
    assert abs(aligned[0] - aligned[1]) < 1e6  # done times agree: nothing to align
    assert lo[0] <= 0 <= hi[0] and last_share[0] == 1.0  # consistent unshifted, and it completes them
