"""A small synthetic fleet history, faithful to the FR 2.10 format: attempts
of a few ranks on named hosts, each healthy or hung on a rank that never
joins the last all_reduce, at a chosen time. For the fleet reports' tests."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

STEPS = 6


@dataclass
class Attempt:
    job: str
    attempt: int
    started: datetime
    hosts: list[str]  # host of each rank, by rank
    missing: list[int] = field(default_factory=list)  # ranks that never enqueue the last all_reduce


def _entry(rank: int, seq: int, t_ns: int, state: str) -> dict:
    return {
        "record_id": seq - 1, "pg_id": 0, "process_group": ("0", "default_pg"), "collective_seq_id": seq,
        "p2p_seq_id": 0, "op_id": seq, "profiling_name": "nccl:all_reduce", "time_created_ns": t_ns,
        "duration_ms": None, "input_sizes": [[1024]], "input_dtypes": ["Float"], "output_sizes": [[1024]],
        "output_dtypes": ["Float"], "state": state, "time_discovered_started_ns": t_ns + 1000,
        "time_discovered_completed_ns": t_ns + 2000 if state == "completed" else None, "retired": state == "completed",
        "timeout_ms": 600000, "is_p2p": False, "thread_id": "1", "thread_name": "pt_main_thread",
        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
    }


def write(root: Path, attempts: list[Attempt]) -> Path:
    """Dumps under root/<job>/attempt-<n>/<host>/rank_<r> (the default layout)."""
    for a in attempts:
        world = len(a.hosts)
        t0 = int(a.started.timestamp() * 1e9)
        for rank, host in enumerate(a.hosts):
            last = STEPS - 1 if rank in a.missing else STEPS
            hung = bool(a.missing)
            entries = [_entry(rank, seq, t0 + seq * 100_000_000 + rank * 1000,
                              "scheduled" if hung and seq == STEPS else "completed") for seq in range(1, last + 1)]
            dump = {"version": "2.10", "comm_lib_version": "2.21.5", "entries": entries,
                    "pg_config": {"0": {"name": "0", "desc": "default_pg", "ranks": json.dumps(list(range(world)))}},
                    "pg_status": {"0": {"last_enqueued_collective": last, "last_started_collective": last,
                                        "last_completed_collective": last - (1 if hung and rank not in a.missing else 0)}}}
            path = root / a.job / f"attempt-{a.attempt}" / host / f"rank_{rank}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(dump, protocol=4))
    return root
