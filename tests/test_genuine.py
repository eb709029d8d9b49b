"""Dumps exactly as torch's gloo backend writes them (tests/fixtures/genuine, made by its make_genuine.py
under torch 2.13.0, and tests/fixtures/genuine-versions/<torch version>, the same cases run under other
torch releases; bytes unedited): no group lists (2.13) or a group's list where the world's would be (2.14),
pg_status keyed by rank-local ids, every entry "scheduled", renamed ops, ranks that died or were aborted
without a dump. Each case and its healthy twin is diagnosed as its truth says, alone and beside all the
others, on every torch version's set."""

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
# each torch release's set of the same cases: its folder (case folders and truth.json)
VERSIONS = {"2.13.0": GENUINE} | {d.name: d for d in sorted((FIXTURES / "genuine-versions").iterdir()) if d.is_dir()}
# releases whose gloo backend writes empty Flight Recorder buffers (no entry, group or pg_status counter)
RECORD_NOTHING = {"2.10.0"}
SETS = {v: d for v, d in VERSIONS.items() if v not in RECORD_NOTHING}
TRUTHS = {v: json.loads((d / "truth.json").read_text()) for v, d in VERSIONS.items()}
TRUTH = TRUTHS["2.13.0"]
CASES = sorted({t["case"] for t in TRUTH})
EVERY = [(v, t) for v, truths in TRUTHS.items() for t in truths]
# the kind of failure each case's fault is (frlake.entities.Kind): a rank that died, skipped a collective or
# sent another size; a rank that sleeps before its collectives
KIND = {"dead_rank": "cpu_side", "pg_status_only": "cpu_side", "snapshots": "cpu_side", "pipeline_p2p": "cpu_side",
        "coalesced_mismatch": "misconfigured", "op_names": "misconfigured", "bystander_abort": "misconfigured",
        "straggler": "slow"}


def _lay_out(case: str, dst: Path, version: str = "2.13.0") -> Path:
    """A case's dumps, copied with the mtimes they had when torch's job wrote them (git keeps none)."""
    shutil.copytree(VERSIONS[version] / case, dst / case)
    for t in TRUTHS[version]:
        for rel, times in (t.get("files") or {}).items() if t["case"] == case else ():
            os.utime(dst / case / t["job"] / rel, ns=(times["mtime_ns"], times["mtime_ns"]))
    return dst / case


def _diagnoses(settings: Settings, truths: list[dict]) -> dict[tuple[str, int], dict]:
    with Frlake(settings) as session:
        return {(t["job"], t["attempt"]): session.diagnose(t["job"], t["attempt"], store=False).to_dict()
                for t in truths}


@pytest.fixture(scope="module", params=list(SETS))
def together(request, tmp_path_factory) -> tuple[str, Settings, dict]:
    """Every case of one torch version's set in one lake."""
    version = request.param
    root = tmp_path_factory.mktemp(f"genuine-{version}")
    paths = [_lay_out(case, root / "dumps", version) for case in CASES]
    settings = Settings.resolve(root / "lake")
    with Frlake(settings) as session:
        summary = session.ingest(paths, IngestOptions(workers=1))
    assert summary.rejected == 0, summary.rejected_files
    return version, settings, _diagnoses(settings, TRUTHS[version])


def _check(t: dict, d: dict, version: str = "2.13.0") -> None:
    what = f"torch {version}: {t['job']} attempt {t['attempt']} ({t['case']}): {d['summary']}"
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
    # the kind, and why: the sentence opens with the rank whose evidence decided it
    assert d["kind"] == (None if t["expected_verdict"] == "healthy" else KIND[t["case"]]), what
    if d["kind"] is not None:
        named = t["root_cause"] if t["root_cause"] is not None else culprits[0]["rank"]
        assert d["kind_why"].startswith(f"rank {named} "), (what, d["kind_why"])
        assert ("a suspect, not a proven cause" in d["kind_why"]) == (t["root_cause"] is None), what


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(TRUTH)), ids=lambda i: f"{TRUTH[i]['job']}-{TRUTH[i]['attempt']}")
def test_each_genuine_attempt_beside_the_others(together, index):
    version, _, diagnoses = together
    t = TRUTHS[version][index]
    _check(t, diagnoses[(t["job"], t["attempt"])], version)


def test_every_torch_version_ran_the_same_cases():
    """Each torch release's set holds every case, with the same truth (the fault is the program's, not torch's)."""
    def key(t):
        return t["job"], t["attempt"], t["expected_verdict"], t["root_cause"], tuple(t["no_dump"])
    assert len(SETS) >= 2 and RECORD_NOTHING <= set(VERSIONS)
    for version, truths in TRUTHS.items():
        assert sorted(map(key, truths)) == sorted(map(key, TRUTH)), version


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_each_case_alone_gives_the_same_bytes(together, case, tmp_path):
    version, _, diagnoses = together
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as session:
        session.ingest([_lay_out(case, tmp_path / "dumps", version)], IngestOptions(workers=1))
    truths = [t for t in TRUTHS[version] if t["case"] == case]
    alone = _diagnoses(settings, truths)
    for t in truths:
        key = (t["job"], t["attempt"])
        _check(t, alone[key], version)
        for d in (alone[key], diagnoses[key]):
            d.pop("seconds")
        assert json.dumps(alone[key], sort_keys=True) == json.dumps(diagnoses[key], sort_keys=True)


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


@pytest.mark.slow
def test_a_pg_config_list_the_dumps_contradict_is_no_group_and_says_so(together):
    """torch 2.14's gloo writes ``{'': {'ranks': '[0, 1]'}}`` in every rank's dump of a DeviceMesh job: a
    subgroup's list where 2.13 wrote ``'[]'``. It is stored as written, and the diagnosis neither takes it for
    a group nor for the world, and says so; a list no dump contradicts (a job of the default group alone,
    whose ``''`` entry lists the world) stays evidence."""
    version, settings, diagnoses = together
    mesh = diagnoses[("dead-rank", 0)]
    assert "" not in {g["pg"] for g in mesh["groups"]}
    contradicted = [n for n in mesh["notes"] if "pg_config entry ''" in n]
    writes_a_group = version >= "2.14"  # 2.11 to 2.13 write '[]' there (the sets committed)
    assert bool(contradicted) == writes_a_group, mesh["notes"]
    flat = diagnoses[("snapshots", 0)]
    assert not [n for n in flat["notes"] if "pg_config entry" in n]
    with Frlake(settings) as session:
        stored = session.connect().execute(
            "SELECT DISTINCT ranks FROM groups WHERE job = 'dead-rank' AND pg_name = ''").fetchall()
    assert stored == [([0, 1] if writes_a_group else [],)]


@pytest.mark.parametrize("version", sorted(RECORD_NOTHING))
def test_dumps_that_record_nothing_are_stored_and_never_called_healthy(version, tmp_path):
    """torch 2.10's gloo writes ``{'version': '2.10', 'pg_config': {}, 'pg_status': {}, 'entries': []}``
    whatever happened: every dump is stored, and no attempt is called healthy (a hung job among them would
    be hidden) nor given a culprit the data cannot show; a rank that left no dump stays named as such."""
    paths = [_lay_out(case, tmp_path / "dumps", version) for case in CASES]
    settings = Settings.resolve(tmp_path / "lake")
    with Frlake(settings) as session:
        summary = session.ingest(paths, IngestOptions(workers=1))
        assert summary.rejected == 0, summary.rejected_files
        for t in TRUTHS[version]:
            d = session.diagnose(t["job"], t["attempt"], store=False)
            assert (d.verdict.value, d.records_nothing) == ("incomplete", True), d.summary
            assert "cannot tell whether it hung" in d.summary and d.notes
            assert {c.rank for c in d.culprits} <= set(t["no_dump"]) and sorted(d.ranks_missing_dump) == t["no_dump"]
