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
    """The ranks that stand at one stack, in one op of one process group: their first unfinished entry's
    (else their last's)."""

    ranks: tuple[int, ...]
    hosts: tuple[str, ...]
    top_frame: str | None
    op: str | None
    pg: str | None
    pg_desc: str | None
    frames: tuple
    stack_id: int | None
    odd_one_out: bool  # its stack holds fewer ranks than the most-held stack: ranks at another frame than the rest


def stack_diff(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> tuple[StackGroup, ...]:
    """Where each rank stands (its first unfinished entry, else its last),
    grouped by what the ranks share: stack, op and process group, so that a
    row's group is every one of its ranks' (ranks 0, 2 and 3 at one frame of
    an all_gather are two rows when rank 0 waits in tp 1 and 2 and 3 in
    tp 2). The ranks of the most-held stack first, so the ranks at another
    frame than the rest stand out. Each group: its top user frame, its frames
    and its ranks."""
    ev = load(con, job, attempt)
    by_place: dict[tuple, list[int]] = {}
    at_stack: dict[int | None, int] = {}
    first_rank: dict[int | None, int] = {}
    for rank, last in sorted(ev.last.items()):
        by_place.setdefault((last.stack_id, last.op, last.pg, last.pg_desc), []).append(rank)
        at_stack[last.stack_id] = at_stack.get(last.stack_id, 0) + 1
        first_rank.setdefault(last.stack_id, rank)
    frames = stacks(con, [s for s in at_stack if s is not None])
    ordered = sorted(by_place.items(), key=lambda kv: (-at_stack[kv[0][0]], first_rank[kv[0][0]], -len(kv[1]),
                                                       kv[1][0]))
    most_held = ordered[0][0][0] if ordered else None
    groups = []
    for (sid, op, pg, pg_desc), members in ordered:
        groups.append(StackGroup(
            tuple(members), tuple(sorted({ev.hosts[r] for r in members if ev.hosts.get(r)})),
            top_frame(frames.get(sid)) if sid is not None else None, op, pg, pg_desc,
            tuple(frames.get(sid) or ()), sid, sid != most_held and at_stack[sid] < at_stack[most_held]))
    return tuple(groups)
