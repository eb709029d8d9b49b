"""A small synthetic fleet history, faithful to the FR 2.10 format: attempts
of a few ranks on named hosts, each healthy or hung on a rank that never
joins the last all_reduce (and may write no dump), at a chosen time. For the
fleet reports' tests."""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from pathlib import Path

STEPS = 6


@dataclass
class Attempt:
    job: str
    attempt: int
    started: datetime
    hosts: list[str]  # host of each rank, by rank
    missing: list[int] = field(default_factory=list)  # ranks that never enqueue the last all_reduce
    crashed: list[int] = field(default_factory=list)  # ranks among those that write no dump


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
            if rank in a.crashed:
                continue
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


@dataclass
class TimedAttempt:
    """An NCCL attempt with timing (duration_ms): ``groups`` maps a group name
    to its description and ranks; every collective of a group that crosses a
    host in ``slow_links`` takes ``slowdown`` times longer; hosts in
    ``late_watchdog`` discover completions late (their duration is right)."""

    job: str
    attempt: int
    started: datetime
    hosts: list[str]
    groups: dict[str, tuple[str, list[int]]]
    slow_links: set[str] = field(default_factory=set)
    late_watchdog: set[str] = field(default_factory=set)
    slowdown: float = 3.0
    steps: int = 12


def write_timed(root: Path, attempts: list[TimedAttempt]) -> Path:
    for a in attempts:
        t0 = int(a.started.timestamp() * 1e9)
        config = {name: {"name": name, "desc": desc, "ranks": json.dumps(ranks)} for name, (desc, ranks) in a.groups.items()}
        for rank, host in enumerate(a.hosts):
            entries = []
            for step in range(1, a.steps + 1):
                for pg_id, (name, (desc, ranks)) in enumerate(sorted(a.groups.items())):
                    if rank not in ranks:
                        continue
                    slow = any(a.hosts[r] in a.slow_links for r in ranks)
                    duration = 10.0 * (a.slowdown if slow else 1.0) * (1 + 0.03 * ((step * 7 + pg_id) % 5))
                    t = t0 + step * 200_000_000 + pg_id * 40_000_000 + rank * 10_000
                    lag = 50_000_000 if host in a.late_watchdog else 200_000
                    started = t + 100_000
                    entries.append({
                        "record_id": len(entries), "pg_id": pg_id, "process_group": (name, desc),
                        "collective_seq_id": step, "p2p_seq_id": 0, "op_id": step,
                        "profiling_name": "nccl:all_reduce", "time_created_ns": t, "duration_ms": duration,
                        "input_sizes": [[4096]], "input_dtypes": ["Float"], "output_sizes": [[4096]],
                        "output_dtypes": ["Float"], "state": "completed", "time_discovered_started_ns": started,
                        "time_discovered_completed_ns": started + int(duration * 1e6) + lag, "retired": True,
                        "timeout_ms": 600000, "is_p2p": False, "thread_id": "1", "thread_name": "pt_main_thread",
                        "frames": [{"name": "train_step", "filename": "train.py", "line": 42}],
                    })
            dump = {"version": "2.10", "comm_lib_version": "2.21.5", "entries": entries, "pg_config": config,
                    "pg_status": {}}
            path = root / a.job / f"attempt-{a.attempt}" / host / f"rank_{rank}"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(pickle.dumps(dump, protocol=4))
    return root


def slow_link_attempt(job: str, n: int, order: list[int], started: datetime) -> TimedAttempt:
    """16 ranks on 8 hosts (2 each, placed in ``order``); a world group, and
    dp groups of 4 ranks, so each dp group crosses two hosts; h3's links are
    3x slower, h6's watchdog is 50 ms late."""
    hosts = [f"h{order[r // 2]}" for r in range(16)]
    groups = {"0": ("default_pg", list(range(16)))}
    groups.update({str(1 + g): ("dp", list(range(4 * g, 4 * g + 4))) for g in range(4)})
    return TimedAttempt(job, n, started, hosts, groups, slow_links={"h3"}, late_watchdog={"h6"})


def slow_link_fleet(root: Path, start: datetime) -> Path:
    """Three attempts of two jobs with the hosts placed differently (slow_link_attempt)."""
    attempts = [slow_link_attempt("job-x", 0, [0, 1, 2, 3, 4, 5, 6, 7], start + timedelta(days=0, hours=1)),
                slow_link_attempt("job-x", 1, [3, 0, 1, 2, 5, 4, 7, 6], start + timedelta(days=1, hours=1)),
                slow_link_attempt("job-y", 0, [5, 6, 7, 0, 1, 2, 4, 3], start + timedelta(days=0, hours=5))]
    return write_timed(root, attempts)
