"""Point-to-point pairs, coalesced blocks, scatter and gather.

The gloo backend that wrote the corpus records no send/recv and no coalesced
blocks, so these dumps are NCCL-shaped: a synthetic job from bench/synth.py
(pipeline send/recv pairs), and small hand-built jobs in the shape torch's
ProcessGroupNCCL records a coalesced block (its ops stay "scheduled"; an end
marker "nccl:coalesced" with no tensors closes it and carries its state).
"""

from __future__ import annotations

import pickle
import sys

import pytest

from tests.helpers import ROOT, load_trusted

sys.path.insert(0, str(ROOT / "bench"))
from synth import write_job  # noqa: E402


def _diagnose_tree(tmp_path, fl, job):
    summary = fl.ingest([tmp_path / "nfs"])
    assert summary.rejected == 0, summary.rejected_files
    return fl.diagnose(job, 0, store=False)


def _change_p2p(path, op: str, nth_from_end: int, **fields) -> dict:
    """Rewrite one send or recv of a synthetic dump; returns the entry as it was."""
    dump = load_trusted(path)
    calls = [e for e in dump["entries"] if e["profiling_name"].startswith(f"nccl:{op} ")]
    entry = calls[-nth_from_end]
    before = dict(entry)
    entry.update(fields)
    path.write_bytes(pickle.dumps(dump))
    return before


@pytest.mark.parametrize("side", ["recv", "send"])
def test_a_send_and_its_recv_that_disagree_on_sizes(tmp_path, side, fl):
    truth = write_job(tmp_path / "nfs", 8, 300, job="pp", seed=5, ranks_per_host=2, procs=1)
    rank = 6 if side == "recv" else 2  # pp pairs are {r, r + 4}; the low rank sends first
    path = next((tmp_path / "nfs").rglob(f"rank_{rank}"))
    before = _change_p2p(path, side, 3, input_sizes=[[3, 5]], output_sizes=[[3, 5]])
    d = _diagnose_tree(tmp_path, fl, "pp")
    assert d.verdict == "mismatch"
    root = d.root
    assert (root.rank, root.host, root.reason, root.op) == (rank, truth["hosts"][rank // 2], "size_mismatch", side)
    assert root.seq == before["p2p_seq_id"]
    assert "[[3, 5]]" in root.found and "[[3, 5]]" not in root.expected


def test_a_recv_with_another_dtype(tmp_path, fl):
    write_job(tmp_path / "nfs", 8, 300, job="pp", seed=6, ranks_per_host=2, procs=1)
    path = next((tmp_path / "nfs").rglob("rank_5"))
    _change_p2p(path, "recv", 2, input_dtypes=["Float"], output_dtypes=["Float"])
    d = _diagnose_tree(tmp_path, fl, "pp")
    assert (d.verdict, d.root.rank, d.root.reason) == ("mismatch", 5, "dtype_mismatch")


def test_healthy_pipeline_pairs_are_not_flagged(tmp_path, fl):
    write_job(tmp_path / "nfs", 8, 300, job="pp", seed=7, ranks_per_host=2, procs=1)
    d = _diagnose_tree(tmp_path, fl, "pp")
    assert (d.verdict, d.culprits) == ("healthy", [])


# -- hand-built NCCL-shaped jobs ------------------------------------------------------------------

WORLD = 4
PG = ("0", "default_pg")
_SITES = {"all_reduce": 10, "scatter": 20, "gather": 30}  # the source line each op is called from


def _entry(rid, cseq, pseq, op, name, sizes, *, out=None, state="completed", p2p=False, dtype="BFloat16", t=0,
           line=40):
    """One entry as ProcessGroupNCCL records it (t: nanoseconds after a fixed start; line: its call site)."""
    out = sizes if out is None else out
    return {
        "record_id": rid, "pg_id": 0, "process_group": PG, "collective_seq_id": cseq, "p2p_seq_id": pseq,
        "op_id": rid + 1, "profiling_name": name, "time_created_ns": 1_700_000_000_000_000_000 + t,
        "duration_ms": 0.5 if state == "completed" else None, "input_sizes": sizes,
        "input_dtypes": [dtype] * len(sizes), "output_sizes": out, "output_dtypes": [dtype] * len(out),
        "state": state, "time_discovered_started_ns": None, "time_discovered_completed_ns": None,
        "retired": state == "completed", "timeout_ms": 600_000, "is_p2p": p2p, "thread_id": "1",
        "thread_name": "pt_main_thread",
        "frames": [{"name": "train_step", "filename": "/app/train.py", "line": line}],
    }


def _write_job(tmp_path, ops_of):
    """ops_of(rank) -> list of (collective seq, op, tensors, kind, state): kind "one" is a plain
    collective whose tensors are [(input sizes, output sizes)]; "block" is the ops of one coalesced
    block, each with its (input sizes, output sizes), closed by its end marker."""
    for rank in range(WORLD):
        entries, rid = [], 0
        t0 = rank * 1000  # each rank arrives a little after the one before
        for cseq, op, tensors, kind, state in ops_of(rank):
            for site, (ins, outs) in enumerate(tensors):  # a block's ops are never updated after they are enqueued
                entries.append(_entry(rid, cseq, 0, op, f"nccl:{op}", ins, out=outs,
                                      state=state if kind == "one" else "scheduled", t=t0 + rid * 100_000,
                                      line=_SITES[op] + site))
                rid += 1
            if kind == "block":
                entries.append(_entry(rid, cseq, 0, "coalesced", "nccl:coalesced", [], state=state,
                                      t=t0 + rid * 100_000, line=99))
                rid += 1
        dump = {"version": "2.10", "entries": entries, "pg_status": {},
                "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": str(list(range(WORLD)))}}}
        folder = tmp_path / "nfs" / "nccl" / "attempt-0" / f"node-{rank // 2}"
        folder.mkdir(parents=True, exist_ok=True)
        (folder / f"rank_{rank}").write_bytes(pickle.dumps(dump))


def _steps(rank, *, odd_rank=None, odd_sizes=None, block_state="completed", steps=6):
    ops = []
    for step in range(steps):
        seq = 2 * step + 1
        ops.append((seq, "all_reduce", [([[1024]], [[1024]])], "one", "completed"))
        sizes = [[[512, 64]], [[128]]]
        if rank == odd_rank and step == steps - 1:
            sizes = odd_sizes
        state = block_state if step == steps - 1 else "completed"
        ops.append((seq + 1, "all_reduce", [(s, s) for s in sizes], "block", state))
    return ops


def test_coalesced_blocks_of_a_healthy_job_are_one_call(tmp_path, fl):
    _write_job(tmp_path, lambda rank: _steps(rank))
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert (d.verdict, d.culprits) == ("healthy", [])


def test_a_rank_whose_coalesced_block_differs(tmp_path, fl):
    _write_job(tmp_path, lambda rank: _steps(rank, odd_rank=2, odd_sizes=[[[512, 64]], [[96]]]))
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert d.verdict == "mismatch"
    assert (d.root.rank, d.root.host, d.root.reason, d.root.seq) == (2, "node-1", "size_mismatch", 12)


def test_a_rank_stuck_in_a_coalesced_block(tmp_path, fl):
    def ops(rank):
        steps = _steps(rank, block_state="started" if rank != 3 else "completed")
        return steps if rank != 3 else steps[:-1]  # rank 3 never enqueued the last block

    _write_job(tmp_path, ops)
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert d.verdict == "hang"
    assert (d.root.rank, d.root.reason, d.root.seq) == (3, "missing", 12)


def test_scatter_and_gather_members_hold_different_tensors(tmp_path, fl):
    def ops(rank):
        whole, part = [[64, 8]], [[16, 8]]
        out = []
        for step in range(4):
            out.append((3 * step + 1, "all_reduce", [([[1024]], [[1024]])], "one", "completed"))
            out.append((3 * step + 2, "scatter", [(whole if rank == 0 else [], part)], "one", "completed"))
            out.append((3 * step + 3, "gather", [(part, whole if rank == 0 else [])], "one", "completed"))
        return out

    _write_job(tmp_path, ops)
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert (d.verdict, d.culprits) == ("healthy", [])


def _plain_steps(rank, states):
    """Ten all_reduces; ``states`` maps (rank, seq) to a state other than completed."""
    return [(seq, "all_reduce", [([[1024]], [[1024]])], "one", states.get((rank, seq), "completed"))
            for seq in range(1, 11)]


def test_a_member_that_never_started_what_the_others_completed(tmp_path, fl):
    _write_job(tmp_path, lambda rank: _plain_steps(rank, {(1, 6): "scheduled"}))
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert d.verdict == "mismatch"
    assert (d.root.rank, d.root.reason, d.root.seq, d.root.found) == (1, "state_mismatch", 6, "scheduled")


def test_a_newest_collective_not_yet_seen_completed_is_not_a_mismatch(tmp_path, fl):
    _write_job(tmp_path, lambda rank: _plain_steps(rank, {(1, 10): "scheduled", (2, 10): "started"}))
    d = _diagnose_tree(tmp_path, fl, "nccl")
    assert (d.verdict, d.culprits) == ("healthy", [])
