"""torch's own analyzer tests as a checklist: each case of
test/distributed/flight_recorder/test_fr_analysis.py (torch 2.13) written as real dumps, two ranks in
the shape ProcessGroupNCCL pickles them (ints for sequence ids, dtype lists, a coalesced block's ops
sharing its sequence id and closed by its end marker), and frlake's verdict beside theirs.

Where frlake deliberately differs, the case says so (``differs``); with torch installed,
``test_torch_agrees`` runs torch's analyzer on the same files and checks that it flags exactly the
cases it should.
"""

from __future__ import annotations

import os
import pickle

import pytest

T0 = 1_760_000_000_000_000_000
TEMPLATE_PG_CONFIG = [  # LOADED_FR_DETAIL_TEMPLATE: sub_pg "1" is [0] on rank 0 and [1] on rank 1
    {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "sub_pg", "ranks": "[0]"}},
    {"0": {"name": "0", "desc": "default_pg", "ranks": "[0, 1]"}, "1": {"name": "1", "desc": "sub_pg", "ranks": "[1]"}},
]


def op(name, ins, outs, *, seq, state="completed", dtype="Float", out_dtype=None, pg=("0", "default_pg")):
    return {"name": name, "ins": ins, "outs": outs, "seq": seq, "state": state, "dtype": dtype,
            "out_dtype": out_dtype or dtype, "pg": pg}


def _entry(rank, rid, o):
    dtypes = [o["dtype"]] * len(o["ins"]) if o["ins"] and o["ins"] != [[]] else []
    out_dtypes = [o["out_dtype"]] * len(o["outs"]) if o["outs"] and o["outs"] != [[]] and o["out_dtype"] else []
    return {
        "record_id": rid, "pg_id": int(o["pg"][0]), "process_group": o["pg"], "collective_seq_id": o["seq"],
        "p2p_seq_id": 0, "op_id": rid + 1, "profiling_name": f"nccl:{o['name']}",
        "time_created_ns": T0 + rid * 1_000_000 + rank * 1000, "duration_ms": None,
        "input_sizes": o["ins"], "input_dtypes": dtypes, "output_sizes": o["outs"], "output_dtypes": out_dtypes,
        "state": o["state"], "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "retired": o["state"] == "completed", "timeout_ms": 600_000, "is_p2p": False, "thread_id": "1",
        "thread_name": "pt_main_thread", "frames": [{"name": "step", "filename": "/app/t.py", "line": 10 + rid}],
    }


def marker(name, seq):
    return op(name, [], [], seq=seq)


def e(name, ins, outs, state="scheduled", seq=1, out_dtype="Float"):
    """create_one_event() of torch's test: one collective at sequence id 1 of group 0."""
    return op(name, ins, outs, seq=seq, state=state, out_dtype=out_dtype)


# (torch test, case, ops of rank 0, ops of rank 1, torch's expectation, frlake's verdict, suspects, differs)
CASES = [
    ("testBuildDB", "1 matched all_reduce, sub_pg '1' split into [0] and [1]",
     [op("all_reduce", [[4, 4]], [[4, 4]], seq=1), op("all_reduce", [[5, 5]], [[5, 5]], seq=1, pg=("1", "sub_pg"))],
     [op("all_reduce", [[4, 4]], [[4, 4]], seq=1), op("all_reduce", [[5, 5]], [[5, 5]], seq=1, pg=("1", "sub_pg"))],
     "pass", "healthy", [], None),
    ("testBuildDB", "2 matched allreduce_coalesced",
     [op("allreduce_coalesced", [[4, 4]], [[4, 4]], seq=1)], [op("allreduce_coalesced", [[4, 4]], [[4, 4]], seq=1)],
     "pass", "healthy", [], None),
    ("testBuildDB", "3 matched two broadcasts coalesced",
     [op("broadcast", [[4, 4]], [[4, 4]], seq=1, state="scheduled")] * 2 + [marker("coalesced", 1)],
     [op("broadcast", [[4, 4]], [[4, 4]], seq=1, state="scheduled")] * 2 + [marker("coalesced", 1)],
     "pass", "healthy", [], None),
    ("testBuildDB", "4 mis-matched uneven broadcast coalesced",
     [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1, state="scheduled"),
      op("_broadcast_oop", [[5, 5]], [[5, 5]], seq=1, state="scheduled"), marker("ALLGATHER_coalesced", 1)],
     [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1, state="scheduled")] * 2 + [marker("ALLGATHER_coalesced", 1)],
     "fail", "mismatch", [0, 1], None),
    ("testBuildDB", "4 mis-matched uneven broadcast coalesced, every op completed",
     [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1), op("_broadcast_oop", [[5, 5]], [[5, 5]], seq=1),
      marker("ALLGATHER_coalesced", 1)],
     [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1)] * 2 + [marker("ALLGATHER_coalesced", 1)],
     "fail", "mismatch", [0, 1], None),  # completed, so the data may be wrong: the silent corruption case
    ("testBuildDB", "a coalesced block of all_reduces whose second op differs in dtype, completed",
     [op("all_reduce", [[4]], [[4]], seq=1), op("all_reduce", [[8]], [[8]], seq=1),
      marker("allreduce_coalesced", 1)],
     [op("all_reduce", [[4]], [[4]], seq=1), op("all_reduce", [[8]], [[8]], seq=1, dtype="Half"),
      marker("allreduce_coalesced", 1)],
     "fail", "mismatch", [0, 1], None),
    ("testBuildDB", "a coalesced block whose ops come in another order on rank 1, completed",
     [op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1), op("_broadcast_oop", [[5, 5]], [[5, 5]], seq=1),
      marker("ALLGATHER_coalesced", 1)],
     [op("_broadcast_oop", [[5, 5]], [[5, 5]], seq=1), op("_broadcast_oop", [[4, 4]], [[4, 4]], seq=1),
      marker("ALLGATHER_coalesced", 1)],
     "fail", "mismatch", [0, 1], None),  # op by op: the first broadcast sends 16 elements to 25
    ("testBuildDB", "5 matched reduce_oop coalesced",
     [op("_reduce_oop", [[4, 4]], [[4, 4]], seq=1, state="scheduled")] * 2 + [marker("REDUCE_SCATTER_coalesced", 1)],
     [op("_reduce_oop", [[4, 4]], [[4, 4]], seq=1, state="scheduled")] * 2 + [marker("REDUCE_SCATTER_coalesced", 1)],
     "pass", "healthy", [], None),
    ("testBuildDB", "6 empty coalesced call on rank 0",
     [op("all_reduce", [[4, 4]], [[4, 4]], seq=1)],
     [op("all_reduce", [[4, 4]], [[4, 4]], seq=1)]
     + [op("_reduce_oop", [[4, 4]], [[4, 4]], seq=2, state="scheduled")] * 2 + [marker("REDUCE_SCATTER_coalesced", 2)],
     "fail", "hang", [0], None),  # its unit test checks the collective record; its report: rank 0 missing
    ("test_match_one_event", "e1 e2 type", [e("all_reduce", [[4, 4]], [[4, 4]])], [e("all_gather", [[4, 4]], [[4, 4]])],
     "fail", "mismatch", [0, 1], None),
    ("test_match_one_event", "e3 e4 all_to_all undecided", [e("all_to_all", [[4, 4]], [[4, 4]])],
     [e("all_to_all", [[4, 4]], [[4, 4]])], "pass", "healthy", [], None),
    ("test_match_one_event", "e1 e5 input size", [e("all_reduce", [[4, 4]], [[4, 4]])],
     [e("all_reduce", [[5, 4]], [[4, 4]])], "fail", "mismatch", [0, 1], None),
    ("test_match_one_event", "e1 e6 output size", [e("all_reduce", [[4, 4]], [[4, 4]])],
     [e("all_reduce", [[4, 4]], [[5, 4]])], "fail", "mismatch", [0, 1], None),
    ("test_match_one_event", "e7 e7 all_reduce input is not its output", [e("all_reduce", [[4, 4]], [[5, 4]])],
     [e("all_reduce", [[4, 4]], [[5, 4]])], "fail", "healthy", [],
     "both members agree; frlake compares members and does not check an op's own shape rule"),
    ("test_match_one_event", "e1 e9 state", [e("all_reduce", [[4, 4]], [[4, 4]])],
     [e("all_reduce", [[4, 4]], [[4, 4]], state="completed")], "fail", "healthy", [],
     "at a rank's newest collective 'scheduled' only means the watchdog had not looked yet"),
    ("test_match_one_event", "e10 e9 output dtype", [e("all_reduce", [[4, 4]], [[4, 4]], "completed", out_dtype="Half")],
     [e("all_reduce", [[4, 4]], [[4, 4]], state="completed")], "fail", "mismatch", [0, 1], None),
    ("test_match_one_event", "e11 e12 gather, outputs on the root only",
     [e("gather", [[4, 4]], [[4, 4], [4, 4]], "completed")], [e("gather", [[4, 4]], [[]], "completed", out_dtype="")],
     "pass", "healthy", [], None),
    ("test_match_one_event", "e11 e13 gather", [e("gather", [[4, 4]], [[4, 4], [4, 4]], "completed")],
     [e("gather", [[4, 4]], [[4, 4]], "completed", out_dtype="")], "pass", "healthy", [], None),
]
# test_all_events: every op of torch's COLLECTIVES (types.py), the same entry on both ranks.
_COLLECTIVES = ["ALLGATHER_coalesced", "REDUCE_SCATTER_coalesced", "_all_gather_base", "_broadcast_oop",
                "_reduce_oop", "_reduce_scatter_base", "all_gather", "all_gather_into_tensor_coalesced",
                "all_gather_single", "all_gather_v", "all_reduce", "all_reduce_barrier", "all_to_all",
                "all_to_all_single", "all_to_all_v_single", "allreduce_coalesced", "barrier", "broadcast", "gather",
                "new_window", "reduce", "reduce_scatter", "reduce_scatter_single", "reduce_scatter_tensor_coalesced",
                "reduce_scatter_v", "scatter", "split"]
for _name in _COLLECTIVES:
    _ins, _outs = [[4, 4]], [[4, 4]]
    if _name in ("reduce_scatter", "_reduce_scatter_base", "reduce_scatter_tensor_coalesced"):
        _outs = [[8]]
    if _name in ("all_gather", "_all_gather_base", "all_gather_into_tensor_coalesced"):
        _outs = [[32]]
    CASES.append(("test_all_events", _name, [e(_name, _ins, _outs)], [e(_name, _ins, _outs)], "pass", "healthy", [],
                  None))


def _write(folder, ranks_ops):
    for rank, ops in enumerate(ranks_ops):
        host = folder / f"host-{rank}"
        host.mkdir(parents=True, exist_ok=True)
        dump = {"version": "2.10", "pg_status": {}, "pg_config": TEMPLATE_PG_CONFIG[rank],
                "entries": [_entry(rank, i, o) for i, o in enumerate(ops)]}
        (host / f"rank_{rank}").write_bytes(pickle.dumps(dump))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=lambda c: f"{c[0]}-{c[1]}")
def test_frlake_on_torch_analyzer_cases(tmp_path, case, fl):
    _, _, ops0, ops1, _, verdict, suspects, _ = case
    _write(tmp_path / "nfs" / "torch-case" / "attempt-0", [ops0, ops1])
    assert fl.ingest([tmp_path / "nfs"]).rejected == 0
    d = fl.diagnose("torch-case", 0, store=False)
    assert d.verdict == verdict, d.summary
    if verdict == "mismatch":
        assert [(c.rank, c.role) for c in d.culprits] == [(r, "suspect") for r in suspects], d.summary
    elif verdict == "hang":
        assert d.root.rank == suspects[0]


@pytest.mark.slow
@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "test_all_events" or c[1] in ("all_reduce", "all_to_all")],
                         ids=lambda c: f"{c[0]}-{c[1]}")
def test_torch_agrees(tmp_path, case):
    """torch's analyzer on the same files flags the cases its own tests expect to fail, and only those."""
    if not os.environ.get("FRLAKE_REQUIRE_TORCH"):
        pytest.importorskip("torch")
    from tests.torch_fr import run_torch_on_attempt

    _, _, ops0, ops1, torch_expects, _, _, _ = case
    _write(tmp_path / "attempt-0", [ops0, ops1])
    v = run_torch_on_attempt(tmp_path / "attempt-0")
    assert not v.gave_up, v.reason
    flagged = bool(v.culprit_ranks or v.missing_ranks or
                   set(v.mismatch_kinds) - {"MISSING_RANKS"} or "MISMATCH" in " ".join(v.notes))
    assert flagged == (torch_expects == "fail"), (v.mismatch_kinds, v.notes, v.raw_stderr[-2000:])
    if case[5] == "hang":
        assert v.missing_ranks == case[6]  # the rank frlake names
