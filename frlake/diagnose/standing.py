"""Where each rank of an attempt stands, grouped by stack (what ``frlake entries`` shows under its table)."""

from __future__ import annotations

import duckdb

from frlake.diagnose.evidence import load
from frlake.entities import top_frame
from frlake.query.vocabulary import stacks


def stack_diff(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> list[dict]:
    """Where each rank stands (its first unfinished entry, else its last),
    grouped by stack: the largest group first, so the ranks at another frame
    than the rest stand out. Each group: its top user frame, its frames and
    its ranks."""
    ev = load(con, job, attempt)
    by_stack: dict[int | None, list[int]] = {}
    for rank, last in sorted(ev.last.items()):
        by_stack.setdefault(last.stack_id, []).append(rank)
    frames = stacks(con, [s for s in by_stack if s is not None])
    groups = []
    for sid, members in by_stack.items():
        stuck = ev.last[members[0]]
        groups.append({"ranks": members, "hosts": sorted({ev.hosts.get(r) for r in members if ev.hosts.get(r)}),
                       "top_frame": top_frame(frames.get(sid)) if sid is not None else None,
                       "op": stuck.op, "pg": stuck.pg, "pg_desc": stuck.pg_desc,
                       "frames": frames.get(sid) or [], "stack_id": sid})
    groups.sort(key=lambda g: (-len(g["ranks"]), g["ranks"][0]))
    for i, g in enumerate(groups):
        g["odd_one_out"] = i > 0 and len(g["ranks"]) < len(groups[0]["ranks"])
    return groups
