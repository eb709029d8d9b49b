"""Where torch's analyzer gives up: missing dump files, empty pg_config,
wrapped ring buffers, JSON, many groups hanging at once."""

from __future__ import annotations

import json
import pickle
import shutil
import sys

import pytest

from tests.helpers import FIXTURES, ROOT, load_trusted

sys.path.insert(0, str(ROOT / "bench"))
from synth import write_job  # noqa: E402


def _diagnose_tree(fl, tree, job):
    summary = fl.ingest([tree])
    assert summary.rejected == 0, summary.rejected_files
    return fl.diagnose(job, 0, store=False)


@pytest.mark.slow
@pytest.mark.parametrize("fmt", ["pickle", "json"])
def test_wrapped_buffers_and_a_missing_collective(tmp_path, fmt, fl):
    truth = write_job(tmp_path / "nfs", 32, 300, job="wrap", fault="missing_last", culprit=13, seed=3, fmt=fmt,
                      ranks_per_host=4, procs=1)
    d = _diagnose_tree(fl, tmp_path / "nfs", "wrap")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.host, d.root.reason) == (13, truth["culprit_host"], "missing")
    assert d.root.seq == truth["hang"]["collective_seq_id"]


def test_a_rank_without_a_dump_is_named(tmp_path, fl):
    truth = write_job(tmp_path / "nfs", 16, 200, job="crash", fault="missing_last", culprit=6, seed=1,
                      ranks_per_host=4, procs=1)
    victim_file = next((tmp_path / "nfs").rglob("rank_6"))
    victim_file.unlink()  # it crashed before it could dump
    d = _diagnose_tree(fl, tmp_path / "nfs", "crash")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.reason) == (6, "no_dump")
    assert d.root.host == truth["culprit_host"]  # inferred from its block of ranks on that host
    assert d.ranks_missing_dump == [6]
    # only its absence speaks, and no file of it names its host: both said, in the report and the summary
    assert (d.root.role, d.root.evidence, d.root.host_inferred) == ("root", "no_dump", True)
    assert "weaker evidence (no dump)" in d.root.detail and "(host inferred)" in d.summary
    from frlake.server import create_app
    from frlake.server.config import ServerConfig

    page = create_app(ServerConfig(fl.settings)).test_client().get(
        "/jobs/crash/attempts/0").get_data(as_text=True)
    assert 'id="host-inferred"' in page and 'id="weak-evidence"' in page
    assert page.count("weaker evidence (no dump)") == 1  # the label once, the detail after it without its prefix


def _crashed_pair(tmp_path, fl, dropped, ranks_per_host):
    """A job of 8 where rank 2 never joins a collective of its group (of ranks 0-3), its dump and another
    member's lost: the others wait for both, and nothing dates either."""
    write_job(tmp_path / "nfs", 8, 200, job="pair", fault="missing_last", culprit=2, seed=1,
              ranks_per_host=ranks_per_host, procs=1)
    for rank in dropped:
        next((tmp_path / "nfs").rglob(f"rank_{rank}")).unlink()
    return _diagnose_tree(fl, tmp_path / "nfs", "pair")


def test_ranks_without_dumps_on_two_hosts_are_suspects_not_a_guess(tmp_path, fl):
    d = _crashed_pair(tmp_path, fl, [1, 2], ranks_per_host=1)
    assert d.verdict == "hang"
    suspects = [c for c in d.culprits if c.role == "suspect"]
    assert sorted((c.rank, c.reason, c.evidence) for c in suspects) == [(1, "no_dump", "no_dump"),
                                                                         (2, "no_dump", "no_dump")]
    assert not [c for c in d.culprits if c.role == "root"]
    # one rank per host: the dumps show no block of ranks on a host, so no host is inferred (a guess from blocks
    # of two would name the hosts of ranks 0 and 3, both healthy)
    assert [c.host for c in suspects] == [None, None] and not any(c.host_inferred for c in suspects)
    assert "nothing tells which stopped first" in d.summary and "suspects, not proven causes" in d.summary


def test_ranks_without_dumps_on_one_host_name_that_host(tmp_path, fl):
    d = _crashed_pair(tmp_path, fl, [1, 2], ranks_per_host=4)
    roots = [c for c in d.culprits if c.role == "root"]
    assert sorted(c.rank for c in roots) == [1, 2] and {c.host for c in roots} == {"node-0000"}
    assert "ranks 1, 2 on node-0000 (host inferred)" in d.summary and "weaker evidence: no dump" in d.summary


def test_every_host_short_of_a_rank_still_shows_its_block(tmp_path, fl):
    """Ranks 2 and 5 lost, one on each host of four: each host dumped three ranks, and blocks of four (not
    of three) hold them, so each lost rank gets its own host, marked inferred; they are suspects still."""
    d = _crashed_pair(tmp_path, fl, [2, 5], ranks_per_host=4)
    suspects = {c.rank: c for c in d.culprits if c.role == "suspect"}
    assert {r: (c.host, c.host_inferred) for r, c in suspects.items()} == {2: ("node-0000", True),
                                                                          5: ("node-0001", True)}


def test_straggler_in_a_synthetic_job(tmp_path, fl):
    truth = write_job(tmp_path / "nfs", 16, 400, job="slow", fault="straggler", culprit=9, seed=2,
                      ranks_per_host=4, procs=1)
    d = _diagnose_tree(fl, tmp_path / "nfs", "slow")
    assert d.verdict == "straggler"
    assert (d.root.rank, d.root.host) == (9, truth["culprit_host"])
    assert 15 < d.root.lateness_ms < 60


def test_healthy_synthetic_job(tmp_path, fl):
    write_job(tmp_path / "nfs", 16, 300, job="fine", seed=4, ranks_per_host=4, procs=1)
    d = _diagnose_tree(fl, tmp_path / "nfs", "fine")
    assert (d.verdict, d.culprits) == ("healthy", [])


@pytest.mark.slow
@pytest.mark.parametrize("job, attempt, culprit", [("job-223715", 0, 1), ("job-5f5228", 1, 0), ("job-24fdd5", 1, 0)])
def test_membership_is_inferred_from_a_pg_config_as_gloo_writes_it(tmp_path, corpus, job, attempt, culprit, fl):
    tree = tmp_path / "nfs" / job
    shutil.copytree(corpus / job / f"attempt-{attempt}", tree / "attempt-0")
    for path in tree.rglob("rank_*"):
        dump = load_trusted(path)
        # as torch 2.13's gloo backend writes it once subgroups exist: one entry keyed '', no ranks
        dump["pg_config"] = {"": {"name": "", "desc": "", "ranks": "[]"}}
        if path.suffix == ".json":
            path.write_text(json.dumps(dump))
        else:
            path.write_bytes(pickle.dumps(dump))
    d = _diagnose_tree(fl, tmp_path / "nfs", job)
    assert d.verdict in ("hang", "mismatch")
    assert d.root.rank == culprit


def test_record_ids_that_restart_after_a_reset(tmp_path, fl):
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
    d = _diagnose_tree(fl, tmp_path / "nfs", "reset")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.host, d.root.reason) == (6, truth["culprit_host"], "missing")
    assert {c.rank for c in d.culprits if c.role == "root"} == {6}


def test_a_lost_dump_of_a_job_that_finished_its_collectives_is_no_hang(tmp_path, fl):
    """NCCL-shaped dumps in which every collective completed, rank 3's file lost: a completed collective had
    all its members, so nobody waits for rank 3, and the attempt is incomplete, not a hang on rank 3."""
    from datetime import UTC, datetime

    from tests.fleet import Attempt, write

    write(tmp_path / "nfs", [Attempt("idle", 0, datetime(2026, 11, 1, tzinfo=UTC), ["h0", "h0", "h1", "h1"],
                                     crashed=[3])])
    d = _diagnose_tree(fl, tmp_path / "nfs", "idle")
    assert d.verdict == "incomplete", d.summary
    # nothing shows that anything went wrong: the rank is a suspect only because its dump is missing
    assert [(c.rank, c.reason, c.evidence, c.role) for c in d.culprits] == [(3, "no_dump", "no_dump", "suspect")]


def test_a_dump_copied_into_another_hosts_folder_names_no_host(tmp_path, fl):
    """Rank 5's dump, copied into node-0000's folder by mistake, sorts before the original in node-0001's:
    the copy's place won, and the culprit was named on node-0000. The bytes cannot tell which host ran it."""
    truth = write_job(tmp_path / "nfs", 8, 100, job="dup", fault="missing_last", culprit=5, seed=3,
                      ranks_per_host=4, procs=1)
    original = next((tmp_path / "nfs").rglob("rank_5"))
    assert original.parent.name == truth["culprit_host"] == "node-0001"
    shutil.copy(original, original.parent.parent / "node-0000" / "rank_5_copy")
    fl.ingest([tmp_path / "nfs"])
    files = fl.query("SELECT status, reason, host FROM files WHERE rank = 5 ORDER BY status").rows
    d = fl.diagnose("dup", 0)
    assert files == [("duplicate", "claimed_twice", "node-0001"), ("ingested", None, "node-0000")]
    assert (d.verdict, d.root.rank, d.root.host) == ("hang", 5, None)
    assert d.root.hosts_claimed == ["node-0000", "node-0001"]
    assert "node-0000 or node-0001" in d.summary


UNRECORDED = FIXTURES / "real" / "unrecorded_p2p"


def test_ranks_held_up_in_unrecorded_sends_are_suspects_not_causes(fl):
    """Real gloo dumps (tests/fixtures/real/unrecorded_p2p): rank 4 sleeps outside any collective; ranks 0
    and 1 wait in a send or recv to it or its partner, which gloo does not record, so they too look as if
    they never joined the next all_reduce. Fewer ranks wait for them, and every one of those waits for rank
    4 as well: they were named root causes beside it (and blamed host-a in the drain report)."""
    assert fl.ingest([UNRECORDED / "job-stuck", UNRECORDED / "job-lost"]).rejected == 0
    d = fl.diagnose("job-stuck", 0, store=False)
    assert (d.verdict, d.root.rank, d.root.host, d.root.role) == ("hang", 4, "host-c", "root")
    assert [c.rank for c in d.culprits if c.role == "root"] == [4]
    held = {c.rank: c for c in d.culprits if c.role == "suspect"}
    assert sorted(held) == [0, 1] and all("waits for rank 4 too" in c.detail for c in held.values())


def test_a_dumped_rank_that_never_joined_outranks_a_lost_file(fl):
    """job-lost: rank 3 never joins; rank 6's file is lost, and as many ranks wait for it as for rank 3.
    The dump that shows rank 3 never joined comes first: the lost file was named first, on host-d."""
    fl.ingest([UNRECORDED / "job-lost"])
    d = fl.diagnose("job-lost", 0, store=False)
    assert (d.verdict, d.root.rank, d.root.host, d.root.reason) == ("hang", 3, "host-b", "missing"), d.summary

