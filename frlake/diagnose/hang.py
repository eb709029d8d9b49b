"""Who waits for whom, and who started it.

Each rank that dumped is stuck at its last entry. If that is a collective
(group g, sequence s), it waits for the members of g that never enqueued s
(their last sequence id in g is lower, or they left no dump); if it is a
point-to-point op, for its peer. Ranks that wait for nobody but are waited
for are the root causes; the others are victims. Roots are ordered by how
many ranks wait for them (transitively), then by who stopped first.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass, replace

from frlake.diagnose.evidence import Evidence


@dataclass
class Stall:
    rank: int
    role: str  # root | victim | suspect (pending_tail() on unconfirmed times)
    reason: str  # missing | no_dump
    pg: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    waiters: int
    stopped_at: int | None
    waiting_for: tuple[int, ...] = ()  # the ranks it waits for (none: a root cause)
    waited_by: tuple[int, ...] = ()  # the ranks that wait for it directly
    # weaker evidence: "pending_tail" (pending_tail()), "unnamed_peer" (waited for only by sends and recvs
    # whose peer the dump does not name), "no_dump" (a root that left no dump: only its absence speaks),
    # "pg_status" (dumps without entries: only the counters of what each rank enqueued)
    evidence: str | None = None
    explained_by: int | None = None  # a root made a suspect: every rank that waits for it waits for this one too
    stopped_after: int | None = None  # a root made a suspect: tied with this one, which stopped first (tied())
    tied: tuple[int, ...] = ()  # the root that stopped first: the ranks tied with it, made suspects


def waits_for(ev: Evidence) -> tuple[dict[int, set[int]], set[int]]:
    """rank -> the ranks it waits for; and the ranks that wait in a send or recv whose peer the dump does not
    name (torchcomms in a group of more than two): they wait for the members of the group that wait for
    nothing, weaker candidates than a named peer."""
    graph: dict[int, set[int]] = {}
    unnamed: set[int] = set()
    behind: dict[tuple[str, int], frozenset[int]] = {}  # (group, seq) -> members that never enqueued it

    def missing_at(pg: str, seq: int) -> frozenset[int]:
        key = (pg, seq)
        if key not in behind:
            behind[key] = frozenset(
                m for m in ev.members.get(pg, [])
                if m not in ev.hosts or (ev.last_seq.get((m, pg), -1) < seq and not _unknown(ev, m, pg, seq))
            )
        return behind[key]

    for rank, last in ev.last.items():
        targets: set[int] = set()
        done = last.state == "completed"  # every op of its dump done: a member without a dump joined them
        if last.is_p2p and last.peer is None and last.pg is not None and not done:
            targets = {m for m in ev.members.get(last.pg, []) if m != rank and _idle(ev, m)}
            if targets:
                unnamed.add(rank)
        elif last.is_p2p:
            peer = last.peer
            if peer is not None and peer != rank:
                peer_last = ev.last.get(peer)
                if (peer_last is None and not done) or (peer_last is not None and peer_last.t is not None
                                                        and last.t is not None and peer_last.t < last.t):
                    targets.add(peer)
        elif last.pg is not None and last.seq is not None:
            targets = set(missing_at(last.pg, last.seq) - {rank})
            if done:  # only a dump that lacks the collective contradicts its completion
                targets &= ev.hosts.keys()
        graph[rank] = targets
    return graph, unnamed


def _idle(ev: Evidence, rank: int) -> bool:
    """A rank that waits in nothing: no dump, or every op in its dump completed."""
    last = ev.last.get(rank)
    return last is None or last.state == "completed"


def _unknown(ev: Evidence, rank: int, pg: str, seq: int) -> bool:
    """A wrapped buffer that starts after ``seq`` cannot say whether it was enqueued."""
    first = ev.first_seq.get((rank, pg))
    return rank in ev.wrapped and first is not None and first > seq


def stalls(ev: Evidence) -> list[Stall]:
    graph, unnamed = waits_for(ev)
    waited_by: dict[int, set[int]] = {}
    for waiter, targets in graph.items():
        for t in targets:
            waited_by.setdefault(t, set()).add(waiter)
    if not waited_by:
        return []

    def all_waiters(rank: int) -> set[int]:
        seen, todo = {rank}, deque([rank])
        while todo:
            for w in waited_by.get(todo.popleft(), ()):
                if w not in seen:
                    seen.add(w)
                    todo.append(w)
        return seen - {rank}

    def transitive_waiters(rank: int) -> int:
        return len(all_waiters(rank))

    out: list[Stall] = []
    for rank in waited_by:
        if graph.get(rank):
            continue  # it waits for someone else: a victim
        # where the others wait for it: the collective of its first waiter
        waiter = min(waited_by[rank], key=lambda w: (ev.last[w].t or 0, w))
        at = ev.last[waiter]
        reason = "no_dump" if rank not in ev.hosts else "missing"
        stopped = ev.last[rank].t if rank in ev.last else None
        # waited for only by ranks whose peer is not named: the root when it is the one member they can wait for
        guessed = all(w in unnamed for w in waited_by[rank])
        role = "suspect" if guessed and any(len(graph[w]) > 1 for w in waited_by[rank]) else "root"
        # weaker evidence: a rank without a dump may have crashed, hung before it could write one, or lost its file
        # or only from the recorders' counters (dumps without entries: pg_status alone)
        evidence = ("unnamed_peer" if guessed else "no_dump" if reason == "no_dump" else
                    "pg_status" if at.counters else None)
        out.append(Stall(rank, role, reason, at.pg, at.pg_desc, at.seq, at.op, transitive_waiters(rank), stopped,
                         (), tuple(sorted(waited_by[rank])), evidence=evidence))
    # at as many waiters, a dump that shows the rank never joined before a rank only known by its absence;
    # never a rank that stopped later than a rank waiting for it could be first
    out.sort(key=lambda s: (-s.waiters, s.reason == "no_dump", s.stopped_at if s.stopped_at is not None else -1, s.rank))
    out = _explained(out, all_waiters)
    roots = {s.rank for s in out}
    # victims: ranks behind in a group, in order of distance from the roots
    depth = {r: 0 for r in roots}
    todo = deque(roots)
    while todo:
        r = todo.popleft()
        for w in sorted(waited_by.get(r, ())):
            if w not in depth:
                depth[w] = depth[r] + 1
                todo.append(w)
    victims = []
    for rank in sorted(set(waited_by) - roots, key=lambda r: (depth.get(r, 99), r)):
        waiter = min(waited_by[rank], key=lambda w: (ev.last[w].t or 0, w))
        at = ev.last[waiter]
        victims.append(Stall(rank, "victim", "missing", at.pg, at.pg_desc, at.seq, at.op, transitive_waiters(rank),
                             ev.last[rank].t if rank in ev.last else None, tuple(sorted(graph.get(rank, ()))),
                             tuple(sorted(waited_by[rank]))))
    return out + victims


def _explained(roots: list[Stall], all_waiters) -> list[Stall]:
    """A root that fewer ranks wait for than the first, and whose every waiter waits (directly or not) for
    the first too, explains nothing the first does not: it is a suspect, not a cause. It is often held up by
    the first in an op the dump does not record (gloo records no sends or recvs: a rank blocked in a send
    to the culprit looks like a rank that stopped outside any collective). Roots as many ranks wait for as
    the first (a cascade) all stay roots: nothing ranks one above another."""
    first = next((s for s in roots if s.role == "root"), None)
    if first is None:
        return roots
    behind_first = all_waiters(first.rank)
    return [replace(s, role="suspect", explained_by=first.rank)
            if s is not first and s.role == "root" and s.waiters < first.waiters and set(s.waited_by) <= behind_first
            else s for s in roots]


def pending_tail(ev: Evidence) -> list[Stall]:
    """The weaker evidence, for a job that hung (a collective pending longer
    than its timeout when the dump was written) although every rank's first
    unfinished collective had all its members: further down the ranks'
    pending tails, the members missing from their group's newest pending
    collective. Torch's analyzer names the same ranks (the first collective
    some member never enqueued).

    When only file mtimes say the job hung, and they come long after the
    dumps' newest entries (``Timing.confirmed`` false: more likely the time of
    a copy), the ranks are suspects, never root causes."""
    if not ev.timing.overdue:
        return []
    role = "root" if ev.timing.confirmed else "suspect"
    found: dict[int, Stall] = {}
    for pg, tail in sorted(ev.pending_tail.items()):
        waiting = set(tail.waiting)  # a list of up to 16,384 ranks: a set, or the check is quadratic
        missing = [m for m in ev.members.get(pg, [])
                   if m not in waiting and m in ev.hosts
                   and ev.last_seq.get((m, pg), -1) < tail.seq and not _unknown(ev, m, pg, tail.seq)]
        for m in missing:
            if m not in found or len(tail.waiting) > found[m].waiters:
                found[m] = Stall(m, role, "missing", pg, tail.pg_desc, tail.seq, tail.op, len(tail.waiting),
                                 ev.last[m].t if m in ev.last else None, evidence="pending_tail")
    return sorted(found.values(), key=lambda s: (-s.waiters, s.rank))


def stuck(ev: Evidence) -> dict | None:
    """A hang in which no rank waits for another: every member of a group holds the same collective pending
    (not completed by its state, nor by gloo's pg_status counter), at least one of them past its timeout
    when its dump was written (``Timing.confirmed``). Everyone enqueued it and it never completed: the GPU
    kernel, the network or the hardware, not a rank that stopped before it. The dumps name no rank: the
    collective is the finding. The largest such group, then the one most of its members hold as their first
    unfinished collective, then the group's name."""
    if not ev.timing.confirmed:
        return None
    overdue = set(ev.timing.overdue)
    found = []
    for pg, tail in ev.pending_tail.items():
        members = ev.members.get(pg, [])
        if len(members) < 2 or set(tail.waiting) != set(members) or not overdue & set(members):
            continue
        if any(m not in ev.hosts or ev.last_seq.get((m, pg), -1) < tail.seq for m in members):
            continue
        at = sum(1 for m in members if (ev.last[m].pg, ev.last[m].seq) == (pg, tail.seq))  # its first unfinished
        found.append((-len(members), -at, ev.name(pg) or "", pg, tail))
    if not found:
        return None
    *_, pg, tail = min(found)
    return {"pg": ev.name(pg), "pg_desc": tail.pg_desc, "seq": tail.seq, "op": tail.op, "members": len(ev.members[pg]),
            "pending_s": ev.timing.overdue_s, "timeout_s": ev.timing.timeout_s}


TIE_NS = 10_000_000  # 10 ms: last entries closer than this tell nothing of who stopped first


def tied(stalls: list[Stall]) -> list[Stall]:
    """Roots that the same ranks wait for at the same collective, in dumps that record no sends or recvs
    (gloo): in a pipeline whose stage 2 never posts its recv, stage 1 blocks in its send to 2 and stage 3
    in its recv from 2, and all three look alike, ranks that never joined the next collective. The one that
    stopped first (its last entry the oldest) is the root cause; the others are suspects. When they stopped
    within ``TIE_NS`` of each other (the arrivals at one collective spread that much on a healthy job)
    nothing points to one: all are suspects."""
    roots = [s for s in stalls if s.role == "root" and s.reason == "missing"]
    if len(roots) < 2:
        return stalls
    first = roots[0]
    ties = [s for s in roots[1:] if s.waited_by == first.waited_by and (s.pg, s.seq) == (first.pg, first.seq)]
    if not ties:
        return stalls
    undecided = first.stopped_at is None or any(s.stopped_at is None or s.stopped_at - first.stopped_at < TIE_NS
                                                for s in ties)
    names = tuple(s.rank for s in ties)
    return [replace(s, role="suspect", stopped_after=None if undecided else first.rank) if s in ties else
            replace(s, role="suspect" if undecided else s.role, tied=names) if s is first else s for s in stalls]
