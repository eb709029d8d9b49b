"""Diagnose one attempt: verdict and culprits, root cause first.

Pure analysis over a DuckDB connection that has the attempt's views; where
the result is stored is the session's business (frlake/session.py)."""

from __future__ import annotations

import time
from dataclasses import replace

import duckdb

from frlake.diagnose import clocks, hang, kinds, launcher, mismatch, straggler
from frlake.diagnose.evidence import BatchReads, Evidence, live_stacks, load
from frlake.diagnose.words import host_words, ranks_text, seconds_text
from frlake.entities import WAIT_LIST, Culprit, Diagnosis, Verdict
from frlake.query.vocabulary import stacks


def diagnose_attempt(con: duckdb.DuckDBPyConnection, job: str, attempt: int, *, complete: bool = False,
                     durations: bool = False, claimed: dict[int, list[str]] | None = None,
                     batch: BatchReads | None = None, host_claims: list[dict] | None = None,
                     failures: list[dict] | None = None) -> Diagnosis:
    """Apply the verdict rules in their order of precedence (see Verdict).

    ``complete``: a user said no more dumps of this attempt will come. Without
    it, an attempt where fewer than half of the world's ranks dumped (one
    uploaded dump of eight) is "incomplete, waiting for more dumps": its
    missing ranks would otherwise all be named as roots that never dumped,
    which the data cannot tell. A mismatch among the dumps there are stands.

    ``durations``: the entries the diagnosis reads keep their durations, for
    the attempt's summary tables (frlake.query.links.summary_tables).

    ``claimed``: rank -> the hosts whose folders hold its dump's bytes, where more than one does (a copy:
    catalog.dumps.claimed_twice). No host is named for such a rank: the culprit lists them (``hosts_claimed``).

    ``batch``: what was read once for every attempt of the batch the connection holds (evidence.BatchReads).

    ``host_claims``: what the host maps beside the dumps, or attached since, say of its ranks' hosts
    (catalog.dumps.host_claims); ``failures``: the workers the launcher saw fail (catalog.dumps.launcher_failures).
    frlake.diagnose.launcher weighs both."""
    started = time.perf_counter()
    ev = load(con, job, attempt, durations=durations, batch=batch)
    missing_dump = [r for r in ev.world if r not in ev.hosts]
    claimed = claimed or {}
    host_claims = host_claims or []
    ev.hosts, filled = launcher.hosts_from_claims(ev.hosts, host_claims)
    hosts, inferred = _hosts_with_inferred(ev, set(claimed))
    for c in host_claims:  # a rank that left no dump: a source's word beats its neighbours' placement
        if c["rank"] not in ev.hosts and c["rank"] not in claimed and (c["rank"] in inferred or c["rank"] not in hosts):
            hosts[c["rank"]] = c["host"]
            inferred.pop(c["rank"], None)
    diag = Diagnosis(job=job, attempt=attempt, verdict=Verdict.HEALTHY, world_size=len(ev.world),
                     ranks_dumped=sorted(ev.hosts), ranks_missing_dump=missing_dump, groups=_progress(ev),
                     several_dumps=[{"rank": r, "dumps": n} for r, n in sorted(ev.several_dumps.items())],
                     timing=ev.timing.to_dict(), progress=ev.progress, complete=complete, notes=_notes(ev),
                     world_inferred=ev.world_inferred)
    _host_sources(diag, ev, host_claims, filled, failures or [])
    stack_of_last = {r: e.stack_id for r, e in ev.last.items()}

    mismatches = mismatch.find(con, ev)
    # a periodic snapshot whose pending collectives are all younger than their timeout shows a job at
    # work: ranks waiting there wait for peers on their way, not for a hung rank
    stalls = [] if ev.timing.in_flight else hang.stalls(ev)
    if not mismatches and not any(s.role == "root" for s in stalls):
        stalls = hang.pending_tail(ev) or stalls
    stalls = _undecided_crashes(stalls, hosts)
    if _records_no_p2p(con, ev, stalls):
        stalls = hang.tied(stalls)
    stalled = any(s.role in ("root", "suspect") for s in stalls)
    if not mismatches and not stalled:
        mismatches = mismatch.states(con, ev)  # the weakest evidence: only when nothing else explains the attempt
    slow = None
    if not mismatches and not stalled:
        # every member holds one collective pending past its timeout and none is missing: stuck inside it
        diag.stuck = hang.stuck(ev)
    if not mismatches and not stalled and diag.stuck is None:
        # lateness only means something in an attempt that did not hang
        slow, lateness, skew = straggler.analyze(con, ev)
        if skew is not None and skew.offsets:
            diag.clocks = skew.to_dict()
            diag.notes += [_clock_note(o, skew.basis) for o in skew.offsets if o.corrected]
        diag.rank_lateness = [dict(vars(r), host=hosts.get(r.rank)) for r in lateness]

    if mismatches:
        diag.verdict = Verdict.MISMATCH
        diag.culprits = [
            Culprit(rank=m.rank, host=hosts.get(m.rank), reason=m.reason, role=m.role, pg=ev.name(m.pg),
                    pg_ranks=_split_members(ev, m.pg), pg_desc=m.pg_desc, seq=m.seq, op=m.op, expected=m.expected,
                    found=m.found, stack_id=m.stack_id,
                    detail=("the members disagree and nothing tells which of them changed: a suspect, not a proven "
                            "cause" if m.role == "suspect" else None))
            for m in mismatches
        ]
        seen = {c.rank for c in diag.culprits}
        diag.culprits += [_stall_culprit(s, ev, hosts, stack_of_last, role="victim")
                          for s in stalls if s.rank not in seen]
    elif stalled:
        diag.verdict = Verdict.HANG
        tied = tuple(s.rank for s in stalls if s.role == "suspect" and s.evidence == "no_dump")
        diag.culprits = [_stall_culprit(s, ev, hosts, stack_of_last, tied=tied) for s in stalls]
    elif diag.stuck is not None:
        diag.verdict = Verdict.HANG  # no rank is named: the collective is the finding
    elif missing_dump:
        diag.verdict = Verdict.INCOMPLETE
        # nothing shows that anything went wrong: a rank is named only because its dump is missing
        diag.culprits = [Culprit(rank=r, host=hosts.get(r), reason="no_dump", role="suspect", evidence="no_dump",
                                 detail="no dump file from this rank, and nothing in the others' dumps waits for it: "
                                        "a suspect only because its dump is missing")
                         for r in missing_dump]
    elif slow is not None:
        diag.verdict = Verdict.STRAGGLER
        diag.culprits = [Culprit(rank=slow.rank, host=hosts.get(slow.rank), reason="straggler", role="root",
                                 pg=ev.name(slow.pg), pg_ranks=_split_members(ev, slow.pg), pg_desc=slow.pg_desc,
                                 seq=slow.seq, op=slow.op, lateness_ms=slow.lateness_ms, p_value=slow.p_value,
                                 effect_size=slow.effect_size, step_ms=slow.step_ms, stack_id=slow.stack_id,
                                 cost=slow.cost,
                                 detail=f"first to arrive late in {slow.root_events} of {slow.total_root_events} "
                                        f"unexplained late arrivals (p = {slow.p_value:.2g} that jitter alone does "
                                        f"this; {slow.effect_size:g} robust sd above the other ranks); its "
                                        f"lateness adds up to {slow.share:.0%} of the time the collectives span")]
    died_of = {f["rank"]: f for f in diag.launcher_failures}
    for c in diag.culprits:
        if c.rank in inferred:
            c.host_inferred, c.host_placement = True, inferred[c.rank]
        died = died_of.get(c.rank)
        if died is not None:
            c.died = _against_dumps(con, ev, died, [w["rank"] for w in c.waited_by or []])
            c.detail = ((c.detail + "; ") if c.detail else "") + f"the launcher says it {c.died['words']}"
        if c.rank in claimed:
            c.hosts_claimed = claimed[c.rank]
            c.detail = ((c.detail + "; ") if c.detail else "") + (
                f"its dump's bytes are in the folders of {len(claimed[c.rank])} hosts ({', '.join(claimed[c.rank])}): "
                "which one ran it they cannot tell, so no host is named")
    if not ev.last and not ev.last_seq and diag.verdict in (Verdict.HEALTHY, Verdict.INCOMPLETE):
        # not one entry, group or pg_status counter in any dump: nothing shows the job healthy, nor who hung it
        diag.verdict, diag.records_nothing = Verdict.INCOMPLETE, True
        diag.culprits = [c for c in diag.culprits if c.evidence == "no_dump"]
        diag.notes.append("no dump of this attempt records a collective, a process group or a pg_status counter "
                          "(torch's gloo backend before 2.11 writes empty Flight Recorder buffers): the data cannot "
                          "tell a hang from a healthy job")
    if not complete and 2 * len(diag.ranks_dumped) < diag.world_size and diag.verdict in (Verdict.HANG,
                                                                                          Verdict.INCOMPLETE):
        diag.verdict, diag.culprits, diag.waiting_for_dumps = Verdict.INCOMPLETE, [], True
    _attach_stacks(con, diag, batch)
    _attach_live_stacks(con, diag, batch)
    kind, diag.kind_why = kinds.kind_of(diag, ev)
    diag.kind = kind.value if kind is not None else None
    diag.summary = summary_sentence(diag)
    diag.seconds = round(time.perf_counter() - started, 4)
    return diag


def _against_dumps(con: duckdb.DuckDBPyConnection, ev: Evidence, died: dict, waiters: list[int]) -> dict:
    """A failure with how long before the dumps of the ranks waiting for it (of every dumped rank, where none is
    named) it came: "40 s before the ranks waiting for it wrote their dumps". The launcher writes its local time
    without its zone; it is read as UTC, and the gap is given only within MAX_DEATH_GAP_S either way (beyond, the
    zone is likely another, and the gap would be hours off)."""
    dumped_ns = con.execute(
        f"SELECT min(written_ns) FROM {ev.rel.dumps}" + (" WHERE list_contains($ranks, rank)" if waiters else ""),
        {"ranks": waiters} if waiters else None).fetchone()[0]
    gap = launcher.seconds_before(died.get("time"), dumped_ns)
    if gap is None or abs(gap) > MAX_DEATH_GAP_S:
        return died
    whose = "the ranks waiting for it" if waiters else "the other ranks"
    # the launcher's time is to the second
    when = (f"within a second of when {whose} wrote their dumps" if abs(gap) < 1 else
            f"{seconds_text(round(abs(gap)))} {'before' if gap >= 0 else 'after'} {whose} wrote their dumps")
    return {**died, "seconds_before_dumps": round(gap, 3),
            "words": f"{died['words']}, {when} (the launcher's time read as UTC)"}


MAX_DEATH_GAP_S = 1800


def _host_sources(diag: Diagnosis, ev: Evidence, claims: list[dict], filled: dict[int, str], failures: list[dict]) -> None:
    """Where the dumped ranks' hosts came from, where the sources disagree, and the launcher's failures."""
    known = [r for r, h in ev.hosts.items() if h is not None]
    sources: dict[str, int] = {}
    ranks = launcher.by_rank(claims)
    for r in known:
        source = launcher.source_of(r, ev.hosts[r], ranks.get(r, []), filled)
        sources[source] = sources.get(source, 0) + 1
    diag.hosts_known = {"ranks": len(ev.hosts), "known": len(known), "from": dict(sorted(sources.items()))}
    if len(known) < len(ev.hosts):
        diag.notes.append(f"host unknown for {len(ev.hosts) - len(known)} of {len(ev.hosts)} dumped ranks: no host "
                          "folder, host map or attached map names it (frlake hosts attach adds one)")
    diag.host_disputes = launcher.disputes(ev.hosts, ranks, filled)
    note = launcher.dispute_note(diag.host_disputes)
    if note:
        diag.notes.append(note)
    diag.launcher_failures = launcher.failures_of(failures)


def _clock_note(o: clocks.ClockOffset, basis: str) -> str:
    """How one host's clock was corrected, with the estimate's spread and causality's bounds."""
    who = o.host or f"rank {o.ranks[0]} (host unknown)"
    ahead = "ahead of" if o.offset_ms > 0 else "behind"
    by = "completion" if basis == "completion" else "members' next calls"
    return (f"{who}'s clock reads {abs(o.offset_ms):.1f} ms {ahead} the others' (spread {o.spread_ms:.1f} ms, "
            f"between {o.lo_ms:.1f} and {o.hi_ms:.1f} ms by causality, over {o.collectives} collectives; aligned "
            f"by each collective's {by}): its ranks' "
            f"times were corrected by {o.corrected_ms:.1f} ms before lateness was weighed")


def _records_no_p2p(con: duckdb.DuckDBPyConnection, ev: Evidence, stalls: list[hang.Stall]) -> bool:
    """Whether the roots' dumps come from a recorder that keeps no sends or recvs (gloo's)."""
    roots = [s.rank for s in stalls if s.role == "root" and s.reason == "missing"]
    if len(roots) < 2:
        return False
    return bool(con.execute(
        f"""SELECT count(*) > 0 AND bool_and(backend = 'gloo') FROM entries
            WHERE job = $job AND attempt = $attempt AND {ev.rel.newest()} AND rank IN (SELECT unnest($ranks))""",
        {"job": ev.job, "attempt": ev.attempt, "ranks": roots}).fetchone()[0])


def _undecided_crashes(stalls: list[hang.Stall], hosts: dict[int, str]) -> list[hang.Stall]:
    """Roots that left no dump and that as many ranks wait for: nothing tells which of them stopped first
    (none has an entry to date it). On one known host, that host is the root cause (a machine that went
    down takes all its ranks with it) and they stay roots; on several hosts, or one unknown, they are
    suspects, not causes: naming the lowest rank would be a guess."""
    roots = [s for s in stalls if s.role == "root"]
    if not roots or roots[0].reason != "no_dump":
        return stalls
    tied = {s.rank for s in roots if s.reason == "no_dump" and s.waiters == roots[0].waiters}
    where = {hosts.get(r) for r in tied}
    if len(tied) < 2 or (len(where) == 1 and None not in where):
        return stalls
    return [replace(s, role="suspect") if s.rank in tied else s for s in stalls]


def _stall_culprit(s: hang.Stall, ev: Evidence, hosts: dict[int, str], stack_of_last: dict[int, int | None],
                   role: str | None = None, tied: tuple[int, ...] = ()) -> Culprit:
    """``tied``: the ranks without dumps that are suspects together (see _undecided_crashes)."""
    def named(ranks: tuple[int, ...]) -> list[dict]:
        return [{"rank": r, "host": hosts.get(r)} for r in ranks[:WAIT_LIST]]

    if s.evidence == "unnamed_peer":
        detail = (f"weaker evidence (unnamed peers): {s.waiters} rank(s) wait in sends or recvs of group {ev.name(s.pg)} "
                  f"whose peer the dumps do not name (torchcomms records none), and this is "
                  + ("the one member of the group that waits in nothing" if s.role == "root" else
                     "one of the members that wait in nothing: a suspect, not a proven cause"))
    elif s.explained_by is not None and role is None:
        detail = (f"a suspect, not a proven cause: it never joined seq {s.seq} either, but every rank that waits "
                  f"for it waits for rank {s.explained_by} too, which more ranks wait for; it may be held up by "
                  f"that rank in an op the dump does not record (gloo records no sends or recvs)")
    elif s.evidence == "no_dump" and role is None and s.role == "suspect":
        others = [r for r in tied if r != s.rank]
        where = ("on other hosts" if all(r in hosts for r in tied) else "on hosts the dumps do not all name")
        detail = (f"a suspect, not a proven cause: the same {s.waiters} rank(s) wait for it and for rank(s) "
                  f"{ranks_text(others)}, which left no dump either, {where}; no entry tells which stopped first")
    elif s.stopped_after is not None and role is None:
        detail = (f"a suspect, not a proven cause: it never joined seq {s.seq} either and the same rank(s) wait "
                  f"for it, but rank {s.stopped_after} stopped first; gloo records no sends or recvs, so whether it "
                  f"waits for rank {s.stopped_after} in one (a pipeline's send or recv) the dumps cannot show")
    elif s.tied and role is None and s.role == "suspect":
        detail = (f"a suspect, not a proven cause: it and rank(s) {ranks_text(s.tied)} never joined seq {s.seq}, the "
                  f"same rank(s) wait for them, and they stopped within {hang.TIE_NS // 1_000_000} ms of each other; gloo records no sends "
                  f"or recvs, so which of them holds up the others the dumps cannot show")
    elif s.evidence == "pg_status" and role is None:
        detail = (f"weaker evidence (pg_status only): the dumps hold no entries (includeCollectives=False), only "
                  f"each rank's count of the collectives it enqueued per group; this rank's is behind its peers' "
                  f"in a group they share, and {s.waiters} rank(s) are ahead of it there; groups are matched "
                  f"across ranks by their rank-local ids, not by name")
    elif s.evidence == "no_dump" and role is None:
        detail = (f"weaker evidence (no dump): {s.waiters} rank(s) wait for it, and it left no dump: it crashed, "
                  f"hung before it could write one, or its file was lost; only its absence speaks")
    elif s.role == "root" and s.tied:
        detail = (f"{s.waiters} rank(s) wait for it; rank(s) {ranks_text(s.tied)} never joined seq {s.seq} either "
                  f"and the same rank(s) wait for them, but this rank stopped first (its last entry is the oldest); "
                  f"gloo records no sends or recvs, so the dumps cannot show whether they wait for it in one "
                  f"(suspects, not proven causes)")
    elif s.role == "root":
        detail = f"{s.waiters} rank(s) wait for it"
    else:
        who = ", ".join(map(str, s.waiting_for[:8])) + (" ..." if len(s.waiting_for) > 8 else "")
        detail = f"behind, waiting for rank(s) {who}" if s.waiting_for else "behind, waiting for another rank"
    if s.evidence == "pending_tail":
        detail = (f"weaker evidence (pending tail): every rank's first unfinished collective had all its members, "
                  f"but the job hung (a collective pending longer than its timeout when the dumps were written) "
                  f"and this rank never enqueued seq {s.seq}, the newest collective {s.waiters} member(s) of its "
                  f"group hold pending")
        if s.role == "suspect":
            detail = (f"a suspect, not a proven cause: this rank never enqueued seq {s.seq}, which {s.waiters} "
                      f"member(s) of its group hold pending, but only the files' mtimes say the job hung, and they "
                      f"are far later than the dumps' newest entries (a copy that did not keep mtimes?); a time in "
                      f"the file names, or the original files, would settle it")
        elif ev.timing.overdue_from == "mtime":
            detail += " (the dumps' time is their files' mtime: their names carry no time)"
    return Culprit(rank=s.rank, host=hosts.get(s.rank), reason=s.reason, role=role or s.role, pg=ev.name(s.pg),
                   pg_ranks=_split_members(ev, s.pg), pg_desc=s.pg_desc, seq=s.seq, op=s.op, waiters=s.waiters,
                   stack_id=stack_of_last.get(s.rank), stack_entry=_entry_of(ev.last.get(s.rank), s), detail=detail,
                   evidence=None if s.evidence == "no_dump" and role == "victim" else s.evidence,
                   waiting_for=named(s.waiting_for) or None, waited_by=named(s.waited_by) or None)


def _entry_of(last, stall) -> dict | None:
    """The entry a hang culprit's stack is of (its last): said when it is not the collective it hangs at."""
    if last is None or (last.pg, last.seq) == (stall.pg, stall.seq):
        return None
    return {"op": last.op, "pg": last.pg, "pg_desc": last.pg_desc, "seq": last.seq}


def _attach_live_stacks(con: duckdb.DuckDBPyConnection, diag: Diagnosis, batch: BatchReads | None) -> None:
    """Beside its FR stack (its last collective), the culprit's live stack from the torch debug server
    (where it really was: a data loader, a checkpoint), for the root causes."""
    roots = sorted({c.rank for c in diag.culprits if c.role == "root"})
    if batch is not None and (diag.job, diag.attempt) not in batch.staged:
        return  # the attempt has none
    live = live_stacks(con, diag.job, diag.attempt, roots)
    for c in diag.culprits:
        if c.role == "root" and c.rank in live:
            c.live_stack = live[c.rank]


def _split_members(ev: Evidence, pg: str | None) -> list[int] | None:
    """The members of a group that shares its name with others (shown beside the name)."""
    return ev.members.get(pg) if pg in ev.names else None


def _notes(ev: Evidence) -> list[str]:
    notes = []
    if ev.names:
        shared = sorted(set(ev.names.values()))
        notes.append(f"disjoint process groups share the name(s) {', '.join(shared)}: each is told apart by its "
                     "members (pg_config)")
    for pg, ranks in sorted(ev.contradicted.items()):
        notes.append(f"the pg_config entry {pg!r} lists ranks {ranks_text(ranks)}, and dumps of other ranks list it "
                     "too: it describes no group of these dumps (gloo's one entry holds the group torch registered "
                     "last), so it is not taken for any group's members or for the world")
    if ev.renumbered:
        notes.append(f"{len(ev.renumbered)} rank(s) count one sequence id over all their groups (torchcomms): "
                     "their collectives are numbered per group in the order they were enqueued")
    return notes


def _attach_stacks(con: duckdb.DuckDBPyConnection, diag: Diagnosis, batch: BatchReads | None) -> None:
    ids = [c.stack_id for c in diag.culprits if c.stack_id is not None]
    known = batch.frames if batch is not None else {}  # read with the batch (BatchReads.frames)
    frames = {i: known[i] for i in ids if i in known}
    frames.update(stacks(con, [i for i in ids if i not in known]))
    for c in diag.culprits:
        c.stack = frames.get(c.stack_id) if c.stack_id is not None else None


def _hosts_with_inferred(ev: Evidence, unsure: set[int]) -> tuple[dict[int, str], dict[int, str]]:
    """Hosts of dumped ranks; for a rank without a dump, the host of its block
    of consecutive ranks, when the dumps show such blocks. Returns the hosts
    and the ranks whose host is so inferred (no file of theirs names it), each
    with how strong its placement is (``strong`` or ``weak``).

    A launcher such as torchrun gives each node ``nproc_per_node`` consecutive
    ranks. The block size is the smallest, from the most ranks any host
    dumped, that holds: every host's ranks in one block, no two hosts in one
    block. With one rank dumped per host, or ranks dealt round-robin, nothing
    is inferred: a guess would name a healthy host. ``unsure``: ranks whose
    dump is in several hosts' folders; they get no host and show no block.

    A placement is ``strong`` when at least half of the rank's block (and two
    ranks) dumped from that one host, and at least two other hosts' blocks
    are whole (every rank of the block dumped, from one host): the layout is
    seen in full elsewhere and the block's own ranks agree. Else ``weak``."""
    hosts = {r: h for r, h in ev.hosts.items() if r not in unsure}
    for r, h in ev.live_hosts.items():  # the debug server's rank -> host map (its stacks files' headers)
        hosts.setdefault(r, h)
    missing = [r for r in ev.world if r not in hosts and r not in unsure]
    if not missing:
        return hosts, {}
    span: dict[str, tuple[int, int, int]] = {}  # host -> (lowest rank, highest rank, ranks)
    for r, h in ev.hosts.items():  # the dumped ranks, as their dumps place them
        if r in unsure:
            continue
        lo, hi, n = span.get(h, (r, r, 0))
        span[h] = (min(lo, r), max(hi, r), n + 1)
    most = max((n for _, _, n in span.values()), default=0)
    if most < 2:
        return hosts, {}
    for size in range(most, min(len(ev.world), _MAX_RANKS_PER_HOST) + 1):
        block_of: dict[int, str] = {}
        for h, (lo, hi, _) in span.items():
            if lo // size != hi // size or lo // size in block_of:
                break
            block_of[lo // size] = h
        else:
            whole = {h for h, (_, _, n) in span.items() if n == size}
            inferred = {}
            for r in missing:
                h = block_of.get(r // size)
                if h is not None:
                    hosts[r] = h
                    siblings = span[h][2]
                    strong = siblings >= max(2, size / 2) and len(whole - {h}) >= 2
                    inferred[r] = "strong" if strong else "weak"
            return hosts, inferred
    return hosts, {}


_MAX_RANKS_PER_HOST = 1024  # no block of ranks larger is looked for


def _progress(ev: Evidence) -> list[dict]:
    out = []
    for pg, ranks in sorted(ev.members.items(), key=lambda kv: (ev.name(kv[0]), kv[1])):
        if not ranks:  # a pg_config entry that lists no one (gloo's '' entry, '[]') is no group of anyone's
            continue
        last = {r: ev.last_seq.get((r, pg)) for r in ranks}
        known = [s for s in last.values() if s is not None]
        frontier = max(known) if known else None  # once per group: a 16,384-rank group made it quadratic
        out.append({
            "pg": ev.name(pg), "pg_desc": ev.desc.get(pg), "ranks": ranks,
            "last_enqueued": {str(r): s for r, s in last.items()},
            "frontier": frontier,
            "behind": sorted(r for r, s in last.items() if known and (s is None or s < frontier)),
        })
    return out


def summary_sentence(d: Diagnosis) -> str:
    root = d.root
    if d.verdict is Verdict.HEALTHY:
        return f"{d.job} attempt {d.attempt}: healthy ({len(d.ranks_dumped)} ranks dumped, no hang, mismatch or straggler)."
    if d.waiting_for_dumps:
        return (f"{d.job} attempt {d.attempt}: incomplete, waiting for more dumps: {len(d.ranks_dumped)} of "
                f"{d.world_size} ranks dumped; no culprit is named until more arrive or the attempt is marked "
                "complete.")
    if d.records_nothing:
        missing = f"; no dump from rank(s) {ranks_text(d.ranks_missing_dump)}" if d.ranks_missing_dump else ""
        return (f"{d.job} attempt {d.attempt}: incomplete: the {len(d.ranks_dumped)} dumps record no collective "
                f"(empty Flight Recorder buffers), so the data cannot tell whether it hung{missing}.")
    if d.stuck is not None:
        s = d.stuck
        return (f"{d.job} attempt {d.attempt}: hang in {s['pg_desc'] or 'pg'} {s['pg']} at seq {s['seq']} "
                f"({s['op']}): all {s['members']} members enqueued it and none completed it{kinds.pending_words(s)}; "
                "stuck inside the collective (GPU kernel, network or hardware): no rank is missing, so the dumps "
                "name none.")
    if root is None:
        return f"{d.job} attempt {d.attempt}: {d.verdict}."
    op = f" ({root.op})" if root.op else ""
    where = f" in {root.pg_desc or 'pg'} {root.pg} at seq {root.seq}{op}" if root.pg is not None else ""
    host = host_words(root)
    if d.verdict is Verdict.MISMATCH and root.role == "suspect":
        suspects = [c for c in d.culprits if c.role == "suspect" and (c.pg, c.seq) == (root.pg, root.seq)]
        named = ", ".join(f"rank {c.rank} on {c.host or 'unknown host'} ({c.found})" for c in suspects)
        return (f"{d.job} attempt {d.attempt}: {root.reason.replace('_', ' ')}{where}: the members disagree and the "
                f"data cannot tell which changed; suspects: {named}.")
    if d.verdict is Verdict.MISMATCH:
        return (f"{d.job} attempt {d.attempt}: {root.reason.replace('_', ' ')}{where}: rank {root.rank} on {host} "
                f"sent {root.found}, the others {root.expected}.")
    if d.verdict is Verdict.HANG:
        if root.evidence == "no_dump":
            return _no_dump_summary(d, where)
        if root.evidence == "unnamed_peer":
            where = f" in {root.pg_desc or 'pg'} {root.pg} ({root.op})"
            who = (f"rank {root.rank} on {host} is the one member that waits in nothing" if root.role == "root" else
                   f"suspects, not proven causes: the members that wait in nothing, rank {root.rank} on {host} first")
            return (f"{d.job} attempt {d.attempt}: hang{where}: {root.waiters} rank(s) wait in sends or recvs whose "
                    f"peer the dumps do not name; {who} (weaker evidence).")
        if root.role == "suspect" and root.reason == "missing" and any(c.role == "suspect" for c in d.culprits[1:]):
            suspects = [c for c in d.culprits if c.role == "suspect" and (c.pg, c.seq) == (root.pg, root.seq)]
            who = "; ".join(f"rank {c.rank} on {host_words(c)}" for c in suspects)
            return (f"{d.job} attempt {d.attempt}: hang{where}: {root.waiters} rank(s) wait for ranks that never "
                    f"joined, and nothing tells which of them holds up the others (gloo records no sends or "
                    f"recvs); suspects, not proven causes: {who}.")
        if root.evidence == "pg_status":
            return (f"{d.job} attempt {d.attempt}: hang{where}: rank {root.rank} on {host} is behind; "
                    f"{root.waiters} rank(s) enqueued collectives it never did (weaker evidence: pg_status only, "
                    f"the dumps hold no entries).")
        if root.evidence == "pending_tail" and root.role == "suspect":
            return (f"{d.job} attempt {d.attempt}: perhaps a hang{where}: rank {root.rank} on {host} never enqueued "
                    f"it while {root.waiters} member(s) hold it pending; a suspect, not a proven cause: only the "
                    f"files' mtimes say the job hung, and they look like the time of a copy.")
        if root.evidence == "pending_tail":
            return (f"{d.job} attempt {d.attempt}: hang{where}: rank {root.rank} on {host} never enqueued it "
                    f"while {root.waiters} member(s) hold it pending (weaker evidence: from the pending tail, "
                    f"the first unfinished collectives had all their members).")
        return f"{d.job} attempt {d.attempt}: hang{where}: rank {root.rank} on {host} never joined; {root.waiters} rank(s) wait for it."
    if d.verdict is Verdict.STRAGGLER:
        return (f"{d.job} attempt {d.attempt}: straggler: rank {root.rank} on {host} arrives "
                f"{root.lateness_ms:.1f} ms late to collectives, first in the chain "
                f"(p = {root.p_value:.2g}, {root.effect_size:g} sd above the others' jitter){cost_words(root.cost, root.step_ms)}.")
    return f"{d.job} attempt {d.attempt}: incomplete: no dump from rank(s) {', '.join(map(str, d.ranks_missing_dump))}."


def cost_words(cost: dict | None, step_ms: float | None) -> str:
    """What a straggler cost, as the summary says it."""
    if not cost or not cost.get("wait_ms"):
        return ""
    total = f"{seconds_text(cost['wait_ms'] / 1e3)} in all over {seconds_text(cost['window_ms'] / 1e3)}"
    if cost.get("wait_per_step_ms") is None:
        return f"; the others waited for it {total}"
    step = f"its {step_ms:.1f} ms step" if step_ms else "a step"
    return (f"; the others waited for it {cost['wait_per_step_ms']:.1f} ms a step ({total}): without it "
            f"{step} would take about {cost['step_without_ms']:.1f} ms")


def _no_dump_summary(d: Diagnosis, where: str) -> str:
    """A hang whose root cause left no dump: the ranks the same waiters wait for, on one host (root causes) or
    on several (suspects), each host marked where it is inferred."""
    root = d.root
    crashed = [c for c in d.culprits if c.role == root.role and c.reason == "no_dump" and c.waiters == root.waiters]
    by_host: dict[str, list[int]] = {}
    for c in crashed:
        by_host.setdefault(host_words(c), []).append(c.rank)
    who = "; ".join(f"rank{'s' if len(rs) > 1 else ''} {ranks_text(rs)} on {h}" for h, rs in by_host.items())
    head = f"{d.job} attempt {d.attempt}: hang{where}: {root.waiters} rank(s) wait for"
    if root.role == "suspect":
        where = "on more than one host" if all(c.host for c in crashed) else "on hosts the dumps do not all name"
        return (f"{head} ranks that left no dump, {where}, and nothing tells which stopped first; "
                f"suspects, not proven causes: {who}.")
    left = "left no dump" if len(crashed) == 1 else "left no dumps"
    return (f"{head} {who}, which {left}: crashed, hung before writing, or lost its file "
            f"(weaker evidence: no dump).")
