"""Where each rank of an attempt stands, grouped by stack (what ``frlake entries`` shows under its table)."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from frlake.diagnose.evidence import load
from frlake.entities import top_frame
from frlake.query.vocabulary import stacks
from frlake.values import Record


@dataclass(frozen=True)
class StackGroup(Record):
    """The ranks that stand at one stack: their first unfinished entry's (else their last's)."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    top_frame: str | None
    op: str | None
    pg: str | None
    pg_desc: str | None
    frames: tuple
    stack_id: int | None
    odd_one_out: bool  # fewer ranks than the largest group: the ranks at another frame than the rest


def stack_diff(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> tuple[StackGroup, ...]:
    """Where each rank stands (its first unfinished entry, else its last),
    grouped by stack: the largest group first, so the ranks at another frame
    than the rest stand out. Each group: its top user frame, its frames and
    its ranks."""
    ev = load(con, job, attempt)
    by_stack: dict[int | None, list[int]] = {}
    for rank, last in sorted(ev.last.items()):
        by_stack.setdefault(last.stack_id, []).append(rank)
    frames = stacks(con, [s for s in by_stack if s is not None])
    ordered = sorted(by_stack.items(), key=lambda kv: (-len(kv[1]), kv[1][0]))
    largest = len(ordered[0][1]) if ordered else 0
    groups = []
    for i, (sid, members) in enumerate(ordered):
        stuck = ev.last[members[0]]
        groups.append(StackGroup(
            tuple(members), tuple(sorted({ev.hosts[r] for r in members if ev.hosts.get(r)})),
            top_frame(frames.get(sid)) if sid is not None else None, stuck.op, stuck.pg, stuck.pg_desc,
            tuple(frames.get(sid) or ()), sid, i > 0 and len(members) < largest))
    return tuple(groups)
