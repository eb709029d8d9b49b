"""Diagnoses on the shapes other producers write: split_group, torchcomms, uneven collectives, busy
machines, and mismatches nobody can settle (tests/fixtures/producers, real/split_group; their makers
say where each shape comes from)."""

from __future__ import annotations

import json

import pytest

from frlake.config import Settings
from frlake.diagnose.straggler import MAX_P_VALUE, MIN_EFFECT, binomial_tail
from frlake.session import Frlake
from tests.helpers import FIXTURES

PRODUCERS = FIXTURES / "producers"
EXPECTED = json.loads((PRODUCERS / "expected.json").read_text())
SPLIT = FIXTURES / "real" / "split_group"

pytestmark = pytest.mark.slow  # every test reads a lake of every producer's shape, 4 s to build (pytest --durations)


@pytest.fixture(scope="module")
def producers_lake(tmp_path_factory) -> Settings:
    settings = Settings.resolve(tmp_path_factory.mktemp("producers") / "lake")
    with Frlake(settings) as fl:
        summary = fl.ingest([PRODUCERS / case for case in sorted(EXPECTED)] + [SPLIT / "newgroup", SPLIT / "split5"])
    assert summary.rejected == 0, summary.rejected_files
    return settings


@pytest.fixture
def producers_fl(producers_lake) -> Frlake:
    """A session over the producers' lake for one test."""
    with Frlake(producers_lake) as fl:
        yield fl


@pytest.mark.parametrize("case", sorted(EXPECTED))
def test_each_producer_shape_gets_its_verdict_culprit_and_host(producers_fl, case):
    want = EXPECTED[case]
    d = producers_fl.diagnose(case, 0, store=False)
    assert d.verdict == want["verdict"], d.summary
    if want["culprit_rank"] is None:
        assert d.culprits == []
    else:
        assert (d.root.rank, d.root.host, d.root.role) == (want["culprit_rank"], want["culprit_host"], "root")


def test_pairs_that_share_a_name_are_told_apart_by_their_members(producers_fl):
    d = producers_fl.diagnose("split5_missing", 0, store=False)
    assert (d.root.reason, d.root.pg, d.root.pg_ranks, d.root.op, d.root.seq) == ("missing", "5", [2, 3], "all_gather", 5)
    assert sorted(g["ranks"] for g in d.groups if g["pg"] == "5") == [[0, 1], [2, 3], [4, 5]]
    assert any("share the name" in n for n in d.notes)


@pytest.mark.parametrize("job", ["newgroup", "split5"])
def test_real_torch_pairs_with_one_desc_or_one_name(producers_fl, job):
    """Real torch 2.13 gloo dumps: the first TP pair gathers other shapes than the others. Healthy when all
    complete; rank 3 (host-1) when it never reaches its pair's last all_gather."""
    healthy = producers_fl.diagnose(job, 0, store=False)
    assert (healthy.verdict, healthy.culprits) == ("healthy", [])
    hung = producers_fl.diagnose(job, 1, store=False)
    assert (hung.verdict, hung.root.rank, hung.root.host, hung.root.reason) == ("hang", 3, "host-1", "missing")


def test_torchcomms_sequence_ids_are_numbered_per_group(producers_fl):
    d = producers_fl.diagnose("torchcomms_hang", 0, store=False)
    assert (d.root.pg, d.root.pg_desc, d.root.op, d.root.seq) == ("world", "ncclx", "all_reduce", 6)
    assert any("torchcomms" in n for n in d.notes)
    world = next(g for g in d.groups if g["pg"] == "world")
    assert world["last_enqueued"] == {"0": 6, "1": 5, "2": 6, "3": 6}


def test_a_straggler_says_how_sure_it_is(producers_fl):
    d = producers_fl.diagnose("straggler_100ms", 0, store=False)
    root = d.root
    assert root.p_value <= MAX_P_VALUE and root.effect_size >= MIN_EFFECT
    assert 20 < root.lateness_ms < 50 and 90 < root.step_ms < 110
    assert f"p = {root.p_value:.2g}" in d.summary
    assert producers_fl.diagnose("wobble_8_ranks", 0, store=False).rank_lateness  # measured, not blamed


def test_binomial_tail():
    assert binomial_tail(0, 10, 0.3) == 1.0
    assert binomial_tail(10, 10, 0.5) == pytest.approx(0.5 ** 10)
    assert binomial_tail(3, 4, 0.5) == pytest.approx(5 / 16)
    assert binomial_tail(900, 1000, 0.5) < 1e-100


# -- mismatches nobody can settle ------------------------------------------------------------------


T0 = 1_760_000_000_000_000_000


def _default_group_job(tmp_path, fl, job: str, entries_by_rank: dict[int, list[dict]]):
    """Our own synthetic NCCL dumps of one default group (rank r on host h<r>), ingested and diagnosed."""
    import pickle  # our own synthetic dumps, not input from outside

    members = "[" + ", ".join(map(str, sorted(entries_by_rank))) + "]"
    for rank, entries in entries_by_rank.items():
        folder = tmp_path / "nfs" / job / "attempt-0" / f"h{rank}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(
            {"version": "2.10", "pg_status": {}, "entries": entries,
             "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": members}}}))
    assert fl.ingest([tmp_path / "nfs"]).rejected == 0
    return fl.diagnose(job, 0, store=False)


def _two_ranks(tmp_path, fl, block_sizes):
    """Two ranks of one group; each enqueues one all_reduce, then a coalesced block of broadcasts."""
    from tests.fixtures.make_producers import _nccl_entry

    by_rank = {}
    for rank, sizes in enumerate(block_sizes):
        t = T0 + rank * 1000
        entries = [_nccl_entry(0, ("0", "default_pg"), 1, "all_reduce", [[4, 4]], [[4, 4]], t=t)]
        for i, s in enumerate(sizes):
            entries.append(_nccl_entry(1 + i, ("0", "default_pg"), 2, "_broadcast_oop", [s], [s], t=t + 10 + i,
                                       state="scheduled", line=50 + i))
        entries.append(_nccl_entry(1 + len(sizes), ("0", "default_pg"), 2, "coalesced", [], [], t=t + 20, line=59))
        by_rank[rank] = entries
    return _default_group_job(tmp_path, fl, "pair", by_rank)


def test_two_members_that_disagree_are_both_suspects(tmp_path, fl):
    """torch's testBuildDB case 4: a 2-rank coalesced block whose broadcast sizes differ is a mismatch."""
    d = _two_ranks(tmp_path, fl, [[[4, 4], [5, 5]], [[4, 4], [4, 4]]])
    assert d.verdict == "mismatch"
    assert [(c.rank, c.host, c.role, c.reason) for c in d.culprits] == [
        (0, "h0", "suspect", "size_mismatch"), (1, "h1", "suspect", "size_mismatch")]
    assert "[5, 5]" in d.culprits[0].found and "[5, 5]" in d.culprits[1].expected
    assert "cannot tell" in d.summary and "rank 0 on h0" in d.summary and "rank 1 on h1" in d.summary


def test_ingest_lists_suspects_as_suspects(tmp_path, fl):
    """The command's list of what it diagnosed says "suspects" where the data cannot tell a root cause."""
    from typer.testing import CliRunner

    from frlake.cli.main import app

    _two_ranks(tmp_path, fl, [[[4, 4], [5, 5]], [[4, 4], [4, 4]]])
    out = CliRunner().invoke(app, ["--lake", str(tmp_path / "cli-lake"), "ingest", str(tmp_path / "nfs")],
                             env={"COLUMNS": "100"})
    assert out.exit_code == 0, out.output
    assert "│ pair │       0 │ mismatch │ suspects: rank 0 on h0, rank 1 on h1 │" in out.output, out.output


def test_two_members_that_agree_are_healthy(tmp_path, fl):
    d = _two_ranks(tmp_path, fl, [[[4, 4], [5, 5]], [[4, 4], [5, 5]]])
    assert (d.verdict, d.culprits) == ("healthy", [])


def test_a_torchcomms_ring_names_the_one_member_that_waits_in_nothing(producers_fl):
    """torchcomms names no peer: in a group of four, sends and recvs cannot be paired, so the ranks that wait
    in them wait for the members that wait in nothing. One such member is the root, marked as weaker."""
    d = producers_fl.diagnose("torchcomms_ring_hang", 0, store=False)
    assert (d.root.rank, d.root.role, d.root.evidence, d.root.waiters) == (2, "root", "unnamed_peer", 3)
    assert "do not name" in d.summary and "weaker evidence" in d.root.detail


def test_a_torchcomms_ring_with_two_idle_members_names_suspects_only(tmp_path, fl):
    """The same hang where rank 1's last recv was served too: ranks 1 and 2 both wait in nothing, and the
    data cannot tell which of them the others wait for."""
    import pickle  # our own fixture, not a dump from outside

    folder = tmp_path / "in"
    for src in sorted((PRODUCERS / "torchcomms_ring_hang").rglob("rank_*")):
        dump = pickle.loads(src.read_bytes())
        if src.name == "rank_1":
            for e in dump["entries"]:
                e["retired"] = True
        dst = folder / src.relative_to(PRODUCERS)
        dst.parent.mkdir(parents=True, exist_ok=True)
        dst.write_bytes(pickle.dumps(dump, protocol=2))
    fl.ingest([folder])
    d = fl.diagnose("torchcomms_ring_hang", 0, store=False)
    assert d.verdict == "hang" and {(c.rank, c.role) for c in d.culprits} == {(1, "suspect"), (2, "suspect")}, \
        d.summary
    assert "suspects, not proven causes" in d.summary


def test_one_tensor_of_two_dimensions_is_not_two_tensors_of_one(tmp_path, fl):
    """DuckDB hashes a nested list by its elements: [[1024, 4096]] (one 2-D tensor) and [[1024], [4096]] (two
    1-D tensors) hash alike. The size signature carries each shape's length, so this is a size mismatch
    (a gather compares its inputs alone, one hashed list)."""
    from tests.fixtures.make_producers import _nccl_entry

    shapes = {0: [[1024, 4096]], 1: [[1024], [4096]], 2: [[1024, 4096]], 3: [[1024, 4096]]}
    by_rank = {}
    for rank, sizes in shapes.items():
        t = T0 + rank * 1000
        entries = [_nccl_entry(0, ("0", "default_pg"), 1, "all_reduce", [[8]], [[8]], t=t),
                   _nccl_entry(1, ("0", "default_pg"), 2, "gather", sizes, sizes, t=t + 10, state="scheduled")]
        # the same dtype lists on every rank: the sizes alone must tell them apart
        entries[1]["input_dtypes"] = entries[1]["output_dtypes"] = ["BFloat16"]
        by_rank[rank] = entries
    d = _default_group_job(tmp_path, fl, "shapes", by_rank)
    assert (d.verdict, d.root.rank, d.root.reason) == ("mismatch", 1, "size_mismatch"), d.summary


def test_a_member_alone_at_the_frontier_is_judged_by_its_own_history(tmp_path, fl):
    """Two pipeline pairs (sibling groups: same description and size) whose tensors differ by design. Rank 2
    alone reached seq 3 of its pair (rank 0 never did); its sizes differ from the sibling pair's, but equal
    its own previous call from the same line: not a size mismatch. Rank 0, which never arrived, is the root."""
    import pickle  # our own synthetic dumps, not input from outside

    from tests.fixtures.make_producers import _nccl_entry

    pairs = {0: ("1", [[16]], 2), 2: ("1", [[16]], 3), 1: ("2", [[8]], 3), 3: ("2", [[8]], 3)}
    config = {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1, 2, 3]"},
              "1": {"name": "1", "desc": "pp", "ranks": "[0, 2]"}, "2": {"name": "2", "desc": "pp", "ranks": "[1, 3]"}}
    for rank, (pg, sizes, last) in pairs.items():
        t = T0 + rank * 1000
        entries = [_nccl_entry(seq - 1, (pg, "pp"), seq, "all_reduce", sizes, sizes, t=t + seq * 10, pg_id=int(pg),
                               state="scheduled" if rank == 2 and seq == 3 else "completed")
                   for seq in range(1, last + 1)]
        folder = tmp_path / "nfs" / "pp" / "attempt-0" / f"h{rank}"
        folder.mkdir(parents=True)
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(
            {"version": "2.10", "pg_status": {}, "entries": entries, "pg_config": config}))
    assert fl.ingest([tmp_path / "nfs"]).rejected == 0
    d = fl.diagnose("pp", 0, store=False)
    assert [(c.rank, c.role, c.reason) for c in d.culprits if c.role == "root"] == [(0, "root", "missing")], d.summary
    assert not [c for c in d.culprits if c.reason.endswith("_mismatch")], d.summary
