"""Dumps as the producers write them (tests/fixtures/producers, README.md there):
each fixture with its expected verdict, culprit rank and host, like the corpus tests."""

from __future__ import annotations

import os
import shutil

import pytest
from typer.testing import CliRunner

from frlake.cli.main import app
from frlake.config import Settings
from frlake.ingest.identity import IdentityOptions, IdentityResolver, name_time_ns
from frlake.ingest.pipeline import IngestOptions
from frlake.session import Frlake
from tests.helpers import FIXTURES

PRODUCERS = FIXTURES / "producers"

# (fixture folder, job, attempt, verdict, culprit rank, culprit host, reason, evidence)
CASES = [
    # real torch 2.13 gloo: includeCollectives=False pickles (no 'entries'; all ranks write the same bytes)
    ("torch_no_collectives", "job-nocoll", 0, "healthy", None, None, None, None),
    # real torch 2.13 gloo: rank 2 dumped with nothing to show (no 'entries') while the others wait for it
    ("torch_only_active", "job-active", 0, "hang", 2, "host-a", "missing", None),
    # real torch 2.13 debug server run: rank 2 sits in its data loader (next_batch)
    ("debug_server", "job-dbg", 0, "hang", 2, "vm", "missing", None),
    # the same, rank 2 wrote no dump: its host comes from the debug server's rank -> host map
    ("debug_server", "job-dbg", 1, "hang", 2, "vm", "no_dump", "no_dump"),
    # NCCL-shaped: every first unfinished collective has all members; rank 3 never enqueued seq 7 and 8
    ("pending_tail", "job-tail", 0, "hang", 3, "node-b", "missing", "pending_tail"),
    # the same tails 2 s after they were enqueued (a periodic snapshot of a job at work)
    ("pending_tail", "job-tail", 1, "healthy", None, None, None, None),
    # two snapshots per rank; the newest are over the timeout and rank 1 never joined seq 6
    ("snapshots", "job-snap", 0, "hang", 1, "node-b", "missing", None),
    ("snapshots", "job-snap", 1, "healthy", None, None, None, None),
    # nvidia-resiliency-ext's collector: onlyActive JSON with health_check_results; rank 3 has nothing active
    ("resiliency_ext", "job-nvrx", 0, "hang", 3, "node-d", "missing", None),
]

pytestmark = pytest.mark.slow  # every test reads a lake of every producer's shape, 4 s to build (pytest --durations)


@pytest.fixture(scope="module")
def producers_lake(tmp_path_factory):
    settings = Settings.resolve(tmp_path_factory.mktemp("producers") / "lake")
    with Frlake(settings) as fl:
        summary = fl.ingest([PRODUCERS])
    assert summary.rejected_by_reason.get("debug_server_text") == 3  # torchcomms_health_check x2, fr_trace
    return settings


@pytest.fixture
def producers_fl(producers_lake) -> Frlake:
    """A session over the producers' lake for one test."""
    with Frlake(producers_lake) as fl:
        yield fl


@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[1]}-{c[2]}")
def test_each_producer_gets_its_verdict_and_culprit(producers_fl, case):
    _, job, attempt, verdict, rank, host, reason, evidence = case
    d = producers_fl.diagnose(job, attempt, store=False)
    assert d.verdict == verdict, d.summary
    if rank is None:
        assert d.culprits == []
        return
    assert (d.root.rank, d.root.host, d.root.reason, d.root.role) == (rank, host, reason, "root"), d.summary
    assert d.root.evidence == evidence
    assert not d.root.host_inferred  # a dump, or the debug server's stacks file, names every root's host
    if evidence == "pending_tail":
        assert "weaker evidence" in d.summary and "weaker evidence" in d.root.detail


def test_dumps_without_entries_are_ingested_with_their_pg_status(producers_lake):
    with Frlake(producers_lake) as fl:
        con = fl.connect()
        rows = con.execute("""SELECT d.rank, d.n_entries, s.has_entries, p.last_completed_collective
                              FROM dumps d JOIN snapshots s USING (job, attempt, dump_id)
                              JOIN pg_status p USING (job, attempt, dump_id)
                              WHERE d.job = 'job-nocoll' ORDER BY d.rank""").fetchall()
        # three ranks wrote byte-identical files: each is kept as its own rank's dump
        assert rows == [(0, 0, False, 4), (1, 0, False, 4), (2, 0, False, 4)]
        assert con.execute("SELECT count(DISTINCT sha256) FROM dumps WHERE job = 'job-nocoll'").fetchone() == (3,)


def test_the_newest_snapshot_is_read_whatever_the_order_of_ingest_or_the_mtimes(tmp_path, fl):
    """The old snapshots (10 s in) look like a job at work; the new ones (700 s in) are over the timeout.
    Ingested newest first, the old files touched last (newest mtime): the diagnosis still reads the newest."""
    src = shutil.copytree(PRODUCERS / "snapshots/job-snap/attempt-0", tmp_path / "in/job-snap/attempt-0")
    old = sorted(src.glob("*/trace_rank_*_1796000010"))
    new = sorted(src.glob("*/trace_rank_*_1796000700"))
    for p in old:
        os.utime(p, (2_000_000_000, 2_000_000_000))
    for p in new + old:
        fl.ingest([p])
    d = fl.diagnose("job-snap", 0, store=False)
    assert (d.verdict, d.root.rank, d.root.host) == ("hang", 1, "node-b"), d.summary
    assert d.timing["overdue_ranks"] == [0]
    assert [(p["rank"], p["progress"], p["history"]) for p in d.progress] == [
        (0, "stuck", ["first", "stuck"]), (1, "stuck", ["first", "stuck"])]


def test_rank_progress_says_who_moved_and_who_was_stuck(producers_fl):
    rows = producers_fl.connect().execute("""SELECT attempt, rank, snapshot_index, progress FROM rank_progress
                                           WHERE job = 'job-snap' ORDER BY ALL""").fetchall()
    assert rows == [(0, 0, 1, "first"), (0, 0, 2, "stuck"), (0, 1, 1, "first"), (0, 1, 2, "stuck"),
                    (1, 0, 1, "first"), (1, 0, 2, "moving"), (1, 1, 1, "first"), (1, 1, 2, "moving")]
    assert producers_fl.diagnose("job-snap", 1, store=False).progress[0]["progress"] == "moving"


def test_a_periodic_snapshot_is_in_flight_not_hung(producers_fl):
    timing = producers_fl.diagnose("job-tail", 1, store=False).timing
    assert timing["in_flight"] and timing["overdue_ranks"] == [] and timing["dump_time_from"] == ["file_name"]


@pytest.mark.parametrize("name, rank, time_s", [
    ("trace_rank_3_1730000000", 3, 1730000000),
    ("nccl_trace_rank_3_20260211_124536", 3, 1770813936),
    ("comm_lib_trace_rank_11", 11, None),
    ("_dump_5.json", 5, None),
])
def test_a_rank_is_never_taken_from_a_timestamp(name, rank, time_s):
    resolver = IdentityResolver(IdentityOptions(job="j", attempt=0, host="h"))
    assert resolver.resolve(f"/nfs/{name}", {}).rank == rank
    assert name_time_ns(name) == (None if time_s is None else time_s * 1_000_000_000)


def test_a_time_where_the_rank_should_be_is_refused_and_says_to_give_the_layout(tmp_path, fl):
    dump = next((PRODUCERS / "pending_tail/job-tail/attempt-0/node-a").iterdir()).read_bytes()
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "trace_1730000000").write_bytes(dump)  # a dynamic file name without the rank
    (folder / "rank_7").write_bytes(dump)  # rank 7 of a 4-rank world
    s = fl.ingest([folder], IngestOptions(identity=IdentityOptions(job="j", attempt=0, host="h")))
    reasons = {r["path"].rsplit("/", 1)[-1]: r for r in s.rejected_files}
    assert reasons["trace_1730000000"]["reason"] == "unknown_identity"
    assert "--layout" in reasons["trace_1730000000"]["detail"]
    assert reasons["rank_7"]["reason"] == "rank_outside_world"
    assert s.ingested == 0


def test_live_stacks_are_a_table_and_the_report_shows_the_culprits_beside_its_fr_stack(producers_lake, producers_fl):
    con = producers_fl.connect()
    sources = con.execute("""SELECT source, count(DISTINCT rank), any_value(host) FROM live_stacks
                             WHERE job = 'job-dbg' AND attempt = 1 GROUP BY ALL ORDER BY ALL""").fetchall()
    assert sources == [("faulthandler", 3, "vm"), ("py-spy", 3, "vm")]
    main = con.execute("""SELECT frames[1].name FROM live_stacks WHERE job = 'job-dbg' AND attempt = 1
                          AND source = 'py-spy' AND rank = 2 AND thread LIKE '%MainThread%'""").fetchone()
    assert main == ("next_batch",)
    d = producers_fl.diagnose("job-dbg", 0, store=False)
    assert d.root.stack[0]["name"] == "all_reduce"  # FR: its last collective
    assert d.root.live_stack["frames"][0]["name"] == "next_batch"  # live: where it really is
    assert d.root.live_stack["source"] == "faulthandler"
    out = CliRunner().invoke(app, ["--lake", str(producers_lake.lake), "diagnose", "job-dbg", "--attempt", "0"])
    assert out.exit_code == 0, out.output
    assert "live stack from the debug server" in out.stdout and "next_batch" in out.stdout


def test_the_attempt_page_shows_the_live_stack_and_the_host_page_the_health_checks(producers_lake):
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    client = create_app(ServerConfig(producers_lake)).test_client()
    page = client.get("/jobs/job-dbg/attempts/1")
    assert page.status_code == 200
    assert 'id="live-stack"' in page.text and "next_batch" in page.text
    tail = client.get("/jobs/job-tail/attempts/0").text
    assert 'id="weak-evidence"' in tail
    host = client.get("/hosts/node-d")
    assert host.status_code == 200 and "NIC mlx5_3 link state is DOWN" in host.text
    data = client.get("/api/hosts/node-d").get_json()
    assert {(h["rank"], h["check_name"], h["status"], h["healthy"]) for h in data["health"]} == {
        (2, "gpu", "Healthy", True), (2, "nic", "Healthy", True), (3, "gpu", "Healthy", True), (3, "nic", "Failed", False)}


def test_health_is_queryable(producers_lake):
    with Frlake(producers_lake) as fl:
        rows = fl.query("SELECT host, rank, check_name FROM health WHERE NOT healthy").rows
    assert rows == [("node-d", 3, "nic")]


def test_torch_names_the_pending_tail_culprit_too(tmp_path, producers_fl):
    pytest.importorskip("torch")
    from tests.torch_fr import run_torch_analyzer

    flat = tmp_path / "flat"
    flat.mkdir()
    for p in (PRODUCERS / "pending_tail/job-tail/attempt-0").glob("*/nccl_trace_rank_*"):
        (flat / f"rank_{p.name.split('_')[3]}").symlink_to(p)
    v = run_torch_analyzer(flat)
    assert not v.gave_up, v.reason
    assert v.named_rank == 3
    assert producers_fl.diagnose("job-tail", 0, store=False).root.rank == v.named_rank
