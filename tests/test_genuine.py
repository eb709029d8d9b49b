"""Dumps exactly as torch 2.13's gloo backend writes them (tests/fixtures/genuine, made by its
make_genuine.py, bytes unedited): no group lists, pg_status keyed by rank-local ids, every entry
"scheduled", renamed ops, ranks that died or were aborted without a dump. Each case and its healthy twin
is diagnosed as its truth says, alone and beside all the others."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.session import Frlake
from tests.helpers import FIXTURES

GENUINE = FIXTURES / "genuine"
TRUTH = json.loads((GENUINE / "truth.json").read_text())
CASES = sorted({t["case"] for t in TRUTH})


def _lay_out(case: str, dst: Path) -> Path:
    """A case's dumps, copied with the mtimes they had when torch's job wrote them (git keeps none)."""
    shutil.copytree(GENUINE / case, dst / case)
    for t in TRUTH:
        for rel, times in (t.get("files") or {}).items() if t["case"] == case else ():
            os.utime(dst / case / t["job"] / rel, ns=(times["mtime_ns"], times["mtime_ns"]))
    return dst / case


def _diagnoses(settings: Settings, truths: list[dict]) -> dict[tuple[str, int], dict]:
    with Frlake(settings) as session:
        return {(t["job"], t["attempt"]): session.diagnose(t["job"], t["attempt"], store=False).to_dict()
                for t in truths}


@pytest.fixture(scope="module")
def together(tmp_path_factory) -> tuple[Settings, dict]:
    """Every case in one lake."""
    root = tmp_path_factory.mktemp("genuine")
    paths = [_lay_out(case, root / "dumps") for case in CASES]
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as session:
        summary = session.ingest(paths, IngestOptions(workers=1))
    assert summary.rejected == 0, summary.rejected_files
    return settings, _diagnoses(settings, TRUTH)


def _check(t: dict, d: dict) -> None:
    what = f"{t['job']} attempt {t['attempt']} ({t['case']}): {d['summary']}"
    assert d["verdict"] == t["expected_verdict"], what
    assert d["world_size"] == t["world"], what
    assert sorted(d["ranks_missing_dump"]) == sorted(t["no_dump"]), what
    culprits = d["culprits"]
    if t["root_cause"] is not None:
        root = culprits[0]
        assert (root["rank"], root["role"]) == (t["root_cause"], "root"), what
        assert root["host"] == t["hosts"][str(t["root_cause"])], what
    elif t["expected_verdict"] != "healthy":  # the data cannot tell: suspects, no root cause
        assert culprits and all(c["role"] != "root" for c in culprits), what
        assert {c["rank"] for c in culprits if c["role"] == "suspect"} == set(t["suspects"]), what
    else:
        assert culprits == [], what
    if t["root_cause"] is not None:
        others = {c["rank"] for c in culprits[1:] if c["role"] == "suspect"}
        assert others == set(t["suspects"]) - {t["root_cause"]}, what
    if t["world"] > len(d["ranks_dumped"]):
        assert d["world_inferred"] or t["no_dump"] == [], what  # how the world was found is said


@pytest.mark.slow
@pytest.mark.parametrize("t", TRUTH, ids=lambda t: f"{t['job']}-{t['attempt']}")
def test_each_genuine_attempt_beside_the_others(together, t):
    _check(t, together[1][(t["job"], t["attempt"])])


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_case_alone_gives_the_same_bytes(together, case, tmp_path):
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as session:
        session.ingest([_lay_out(case, tmp_path / "dumps")], IngestOptions(workers=1))
    truths = [t for t in TRUTH if t["case"] == case]
    alone = _diagnoses(settings, truths)
    for t in truths:
        key = (t["job"], t["attempt"])
        _check(t, alone[key])
        for d in (alone[key], together[1][key]):
            d.pop("seconds")
        assert json.dumps(alone[key], sort_keys=True) == json.dumps(together[1][key], sort_keys=True)


def test_snapshots_named_to_the_second_are_a_hang_whatever_their_mtimes(tmp_path):
    """A fresh clone or a copy dates every file to now: the names' whole seconds are all there is, and the
    pending all_reduce, 4.4 s old by the second snapshot and 3.x s by its name's truncated time, is never
    "in flight" by less than the name's resolution."""
    dumps = _lay_out("snapshots", tmp_path / "dumps")
    for f in dumps.rglob("rank_*"):
        os.utime(f)  # now: no mtime lies in its name's second
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as session:
        session.ingest([dumps], IngestOptions(workers=1))
        hung = session.diagnose("snapshots", 0, store=False)
        healthy = session.diagnose("snapshots-healthy", 0, store=False)
    assert (hung.verdict.value, hung.root.rank, hung.timing["in_flight"]) == ("hang", 1, False), hung.summary
    assert healthy.verdict.value == "healthy", healthy.summary
