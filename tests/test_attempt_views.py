"""One attempt's views at scale: the arrivals chart's data and the Perfetto
trace centre on the culprit and the ranks waiting for it, wherever the
culprit's rank is, and the trace is valid trace-event JSON under its cap.

Synthetic NCCL jobs from bench/synth.py with the culprit at a high rank:
512 ranks (quick), and 12,008 ranks with the culprit at rank 12,000 (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from frlake.config import Settings
from frlake.ingest import IngestOptions
from frlake.query.attempt import ArrivalsWindow
from frlake.query.side_by_side import EntryFilter
from frlake.query.trace import TraceWindow
from frlake.server import create_app
from frlake.server.config import ServerConfig
from frlake.session import Frlake
from tests.helpers import FIXTURES, ROOT

sys.path.insert(0, str(ROOT / "bench"))
from synth import write_job  # noqa: E402


def _job(tmp_path_factory, world: int, entries: int, culprit: int) -> tuple[Settings, dict]:
    work = tmp_path_factory.mktemp(f"world-{world}")
    truth = write_job(work / "nfs", world, entries, job="big", fault="missing_last", culprit=culprit)
    settings = Settings.resolve(work / "lake")
    with Frlake(settings) as fl:
        summary = fl.ingest([work / "nfs"], IngestOptions(workers=2))
    assert summary.rejected == 0 and summary.ingested == world
    return settings, truth


@pytest.fixture(scope="module")
def job512(tmp_path_factory):
    return _job(tmp_path_factory, 512, 60, culprit=500)


def check_trace(text: str, cap: int) -> dict:
    """Parse a trace as Perfetto would read trace-event JSON; return it."""
    trace = json.loads(text)
    events = trace["traceEvents"]
    assert isinstance(events, list) and 0 < len(events) <= cap
    phases = Counter(e["ph"] for e in events)
    assert set(phases) <= {"M", "X", "i", "s", "f"}, phases
    for e in events:
        assert isinstance(e["pid"], int) and isinstance(e["name"], str)
        if e["ph"] == "M":
            assert e["name"] in {"process_name", "process_sort_index", "thread_name"} and "args" in e
            continue
        assert isinstance(e["ts"], (int, float)) and e["ts"] > 0
        if e["ph"] == "X":
            assert isinstance(e["dur"], (int, float)) and e["dur"] >= 1 and isinstance(e["tid"], int)
            if e["cat"] not in ("frlake.culprit",):
                assert e["args"]["dur_source"]
        if e["ph"] == "i":
            assert e["s"] in {"g", "p", "t"}
    flows: dict[int, dict[str, dict]] = {}
    for e in events:
        if e["ph"] in "sf":
            assert e["ph"] not in flows.setdefault(e["id"], {}), f"flow {e['id']} has two {e['ph']!r} events"
            flows[e["id"]][e["ph"]] = e
    for fid, pair in flows.items():
        assert set(pair) == {"s", "f"}, f"flow {fid} is not an s/f pair"
        assert pair["s"]["cat"] == pair["f"]["cat"] and pair["s"]["name"] == pair["f"]["name"]
        assert pair["f"]["ts"] >= pair["s"]["ts"] and pair["f"].get("bp") == "e"
    return trace


@pytest.mark.slow
def test_arrivals_centre_on_a_culprit_past_the_first_256_ranks(job512):
    settings, truth = job512
    with Frlake(settings) as fl:
        diag = fl.stored_diagnosis("big", 0)
        assert diag.root.rank == 500
        data = fl.arrivals("big", 0)
    assert data.pg == diag.root.pg and data.focus.rank == 500
    assert 500 in data.ranks and len(data.ranks) <= 256
    assert [c.rank for c in data.culprits][:1] == [500]
    assert (500, diag.root.seq) in data.missing  # the culprit never arrived at the hung collective
    assert data.waiting and 500 not in data.waiting
    assert diag.root.seq in data.seqs and data.seq_window == (data.seqs[0], data.seqs[-1])
    # the group offered first is the culprit's
    assert data.groups[0].pg == diag.root.pg and data.groups[0].culprit
    assert len(data.late_ms) == len(data.ranks) and all(len(r) == len(data.seqs) for r in data.late_ms)


def test_arrivals_pick_a_group_and_a_window(job512):
    settings, _ = job512
    with Frlake(settings) as fl:
        world = fl.arrivals("big", 0, ArrivalsWindow("0", last=10))
        assert world.pg == "0" and world.members == 512 and len(world.ranks) == 256
        assert 500 in world.ranks and world.ranks_truncated  # still centred on the culprit
        tp = fl.arrivals("big", 0, ArrivalsWindow("1"))  # a tp block far from the culprit: ranks 0-7
        assert tp.ranks == tuple(range(8)) and tp.culprits == () and tp.focus is None
        seqs = tp.seqs
        assert len(seqs) >= 6
        lo, hi = seqs[2], seqs[5]
        part = fl.arrivals("big", 0, ArrivalsWindow("1", seq_from=lo, seq_to=hi))
        assert part.seqs == tuple(s for s in seqs if lo <= s <= hi) and part.seq_window == (lo, hi)
        around = fl.arrivals("big", 0, ArrivalsWindow("1", last=4, around=seqs[3]))
        assert seqs[3] in around.seqs and len(around.seqs) == 4


@pytest.mark.slow
def test_trace_window_marks_the_hang_and_stays_under_its_cap(job512):
    settings, _ = job512
    with Frlake(settings) as fl:
        root = fl.stored_diagnosis("big", 0).root
        trace = check_trace("".join(fl.trace("big", 0)), 100_000)
        info = trace["otherData"]["frlake"]
        assert 500 in info["ranks"] and info["focus"]["rank"] == 500 and len(info["ranks"]) <= 64
        events = trace["traceEvents"]
        assert any(e["ph"] == "i" and e["s"] == "g" and e["name"].startswith("hang:") for e in events)
        assert any(e["ph"] == "i" and e["pid"] == 500 and e["cat"] == "frlake.culprit" for e in events)
        flows = [e for e in events if e["ph"] == "f"]
        assert flows and all(e["pid"] == 500 for e in flows)
        waiters = {e["pid"] for e in events if e["ph"] == "s"}
        assert waiters and 500 not in waiters
        # the waiters' pending op lasts until the dump, not 1 us
        pending = [e for e in events if e["ph"] == "X" and e["pid"] in waiters and e["args"].get("pg") == root.pg
                   and e["args"]["seq"] == root.seq]
        assert pending and all(e["args"]["dur_source"] == "pending until the dump" and e["dur"] >= 1000
                               for e in pending)
        # synth writes duration_ms on completed entries: those are real durations
        done = [e for e in events if e["ph"] == "X" and e["args"].get("state") == "completed"]
        assert done and all(e["args"]["dur_source"] == "duration_ms" for e in done)

        small = check_trace("".join(fl.trace("big", 0, TraceWindow(max_events=300))), 300)
        assert small["otherData"]["frlake"]["truncated"] and 500 in small["otherData"]["frlake"]["ranks"]
        picked = check_trace("".join(fl.trace("big", 0, TraceWindow(ranks=(3, 4, 500), around=2))), 100_000)
        assert {e["pid"] for e in picked["traceEvents"]} == {3, 4, 500}
        assert picked["otherData"]["frlake"]["window_ns"][0] is not None
        dp = check_trace("".join(fl.trace("big", 0, TraceWindow(pgs=("dp",)))), 100_000)
        assert {e["args"]["pg"] for e in dp["traceEvents"] if e["ph"] == "X" and "pg" in e["args"]} <= \
            set(dp["otherData"]["frlake"]["pgs"])


@pytest.mark.slow
def test_trace_from_the_cli_and_the_api(job512, tmp_path):
    settings, _ = job512
    out = tmp_path / "t.json"
    proc = subprocess.run([sys.executable, "-m", "frlake.cli.main", "--lake", str(settings.lake), "trace", "big",
                           "--ranks", "496-503", "--around", "3", "--max-events", "500", "-o", str(out)],
                          capture_output=True, text=True, cwd=ROOT)
    assert proc.returncode == 0, proc.stderr
    trace = check_trace(out.read_text(), 500)
    assert {e["pid"] for e in trace["traceEvents"]} == set(range(496, 504))
    client = create_app(ServerConfig(settings)).test_client()
    r = client.get("/api/jobs/big/attempts/0/trace?ranks=499-501&max_events=200&pg=dp")
    assert r.status_code == 200
    api = check_trace(r.get_data(as_text=True), 200)
    info = api["otherData"]["frlake"]
    assert info["ranks"] == [499, 500, 501] and len(info["pgs"]) == 8  # "dp" names the 8 dp stripes
    assert {e["args"]["pg"] for e in api["traceEvents"] if e["ph"] == "X" and "pg" in e["args"]} <= set(info["pgs"])
    assert client.get("/api/jobs/big/attempts/0/trace?max_events=0").status_code == 400
    assert client.get("/api/jobs/big/attempts/0/arrivals?seq=1:2&around=3").status_code == 400


def test_the_entries_of_a_large_attempt_centre_on_the_culprit_in_its_group(job512):
    """512 ranks: the side-by-side view shows the culprit and the hung group's members nearest it (not
    ranks 0-31), in the hung group's collectives, each shown rank a member; members and missing name only
    ranks shown, so the page stays small at any size."""
    settings, truth = job512
    with Frlake(settings) as fl:
        root = fl.stored_diagnosis("big", 0).root
        view = fl.entries("big", 0)
        shown = [r.rank for r in view.ranks]
        assert shown[0] == 500 and len(shown) == 32 and view.ranks_total == 512 and view.ranks_truncated
        assert view.pgs == (root.pg,) and {c.pg for c in view.collectives} == {root.pg}
        at_hang = next(c for c in view.collectives if c.seq == root.seq)
        assert 500 in at_hang.missing and set(at_hang.members) == set(shown)  # every rank shown is a member
        assert at_hang.members_total > len(shown) and set(at_hang.cells) == set(shown) - {500}
        assert view.collectives[-1].seq >= root.seq  # the last collectives, the hang among them
        chosen = fl.entries("big", 0, EntryFilter(ranks=(0, 1)))
        assert [r.rank for r in chosen.ranks] == [0, 1] and not chosen.ranks_truncated
        assert chosen.pgs is None and len({c.pg for c in chosen.collectives}) > 1  # every group of 0, 1
    client = create_app(ServerConfig(settings)).test_client()
    page = client.get("/jobs/big/attempts/0/entries")
    assert page.status_code == 200 and len(page.data) < 400_000
    text = page.get_data(as_text=True)
    assert "Ranks: 32 of 512, the culprits and the ranks nearest them" in text and 'tabindex="0">r500</th>' in text


@pytest.mark.slow
def test_culprit_at_rank_12000_on_the_page_and_in_the_trace(tmp_path_factory):
    settings, truth = _job(tmp_path_factory, 12_008, 12, culprit=12_000)
    client = create_app(ServerConfig(settings)).test_client()
    api = client.get("/api/jobs/big/attempts/0/arrivals").get_json()
    assert 12_000 in api["ranks"] and api["focus"]["rank"] == 12_000
    assert [12_000, api["focus"]["seq"]] in api["missing"]
    page = client.get("/jobs/big/attempts/0").get_data(as_text=True)
    start = page.index('<script type="application/json" id="arrivals-data">') + len(
        '<script type="application/json" id="arrivals-data">')
    embedded = json.loads(page[start:page.index("</script>", start)])
    assert 12_000 in embedded["ranks"] and embedded["focus"]["rank"] == 12_000
    r = client.get("/api/jobs/big/attempts/0/trace?around=5&max_events=20000")
    trace = check_trace(r.get_data(as_text=True), 20_000)
    assert 12_000 in {e["pid"] for e in trace["traceEvents"]}
    assert any(e["ph"] == "f" and e["pid"] == 12_000 for e in trace["traceEvents"])
    entries = client.get("/api/jobs/big/attempts/0/entries")
    assert entries.get_json()["ranks"][0]["rank"] == 12_000 and len(entries.data) < 2_000_000


def test_trace_reads_torchcomms_retired_ops_as_completed(fl):
    """torchcomms' entries stay "scheduled" and are retired once done: the diagnosis reads them as
    completed, and so does the trace (not "pending until the dump" in a healthy job)."""
    assert fl.ingest([FIXTURES / "producers" / "torchcomms_ring_healthy"]).rejected == 0
    assert fl.stored_diagnosis("torchcomms_ring_healthy", 0).verdict.value == "healthy"
    events = check_trace("".join(fl.trace("torchcomms_ring_healthy", 0)), 100_000)["traceEvents"]
    ops = [e for e in events if e["ph"] == "X"]
    assert ops and all(e["args"]["state"] == "completed" for e in ops)
    assert not any(e["args"]["dur_source"] == "pending until the dump" for e in ops)
