"""Diagnose one attempt: verdict and culprits, root cause first.

Pure analysis over a DuckDB connection that has the attempt's views; where
the result is stored is the session's business (frlake/session.py)."""

from __future__ import annotations

import time
from collections import defaultdict

import duckdb

from frlake.diagnose import hang, mismatch, straggler
from frlake.diagnose.evidence import Evidence, load, stacks
from frlake.diagnose.model import Culprit, Diagnosis, Verdict


def diagnose_attempt(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> Diagnosis:
    """Apply the verdict rules in their order of precedence (see Verdict)."""
    started = time.perf_counter()
    ev = load(con, job, attempt)
    missing_dump = [r for r in ev.world if r not in ev.hosts]
    hosts = _hosts_with_inferred(ev)
    diag = Diagnosis(job=job, attempt=attempt, verdict=Verdict.HEALTHY, world_size=len(ev.world),
                     ranks_dumped=sorted(ev.hosts), ranks_missing_dump=missing_dump, groups=_progress(ev),
                     several_dumps=[{"rank": r, "dumps": n} for r, n in sorted(ev.several_dumps.items())])
    stack_of_last = {r: e.stack_id for r, e in ev.last.items()}

    mismatches = mismatch.find(con, ev)
    stalls = hang.stalls(ev)
    stalled = any(s.role == "root" for s in stalls)
    if not mismatches and not stalled:
        mismatches = mismatch.states(con, ev)  # the weakest evidence: only when nothing else explains the attempt
    slow = None
    if not mismatches and not stalled:
        # lateness only means something in an attempt that did not hang
        slow, lateness = straggler.analyze(con, ev)
        diag.rank_lateness = [dict(vars(r), host=hosts.get(r.rank)) for r in lateness]

    if mismatches:
        diag.verdict = Verdict.MISMATCH
        diag.culprits = [
            Culprit(rank=m.rank, host=hosts.get(m.rank), reason=m.reason, role="root", pg=m.pg, pg_desc=m.pg_desc,
                    seq=m.seq, op=m.op, expected=m.expected, found=m.found, stack_id=m.stack_id)
            for m in mismatches
        ]
        seen = {c.rank for c in diag.culprits}
        diag.culprits += [_stall_culprit(s, hosts, stack_of_last, role="victim") for s in stalls if s.rank not in seen]
    elif stalled:
        diag.verdict = Verdict.HANG
        diag.culprits = [_stall_culprit(s, hosts, stack_of_last) for s in stalls]
    elif missing_dump:
        diag.verdict = Verdict.INCOMPLETE
        diag.culprits = [Culprit(rank=r, host=hosts.get(r), reason="no_dump", role="root",
                                 detail="no dump file from this rank") for r in missing_dump]
    elif slow is not None:
        diag.verdict = Verdict.STRAGGLER
        diag.culprits = [Culprit(rank=slow.rank, host=hosts.get(slow.rank), reason="straggler", role="root",
                                 pg=slow.pg, pg_desc=slow.pg_desc, seq=slow.seq, op=slow.op,
                                 lateness_ms=slow.lateness_ms, stack_id=slow.stack_id,
                                 detail=f"first to arrive late in {slow.root_events} of {slow.total_root_events} "
                                        f"unexplained late arrivals")]
    _attach_stacks(con, diag)
    diag.summary = summarize(diag)
    diag.seconds = round(time.perf_counter() - started, 4)
    return diag


def _stall_culprit(s: hang.Stall, hosts: dict[int, str], stack_of_last: dict[int, int | None],
                   role: str | None = None) -> Culprit:
    detail = (f"{s.waiters} rank(s) wait for it" if s.role == "root" else "behind, waiting for another rank")
    return Culprit(rank=s.rank, host=hosts.get(s.rank), reason=s.reason, role=role or s.role, pg=s.pg,
                   pg_desc=s.pg_desc, seq=s.seq, op=s.op, waiters=s.waiters, stack_id=stack_of_last.get(s.rank),
                   detail=detail)


def _attach_stacks(con: duckdb.DuckDBPyConnection, diag: Diagnosis) -> None:
    frames = stacks(con, [c.stack_id for c in diag.culprits if c.stack_id is not None])
    for c in diag.culprits:
        c.stack = frames.get(c.stack_id) if c.stack_id is not None else None


def _hosts_with_inferred(ev: Evidence) -> dict[int, str]:
    """Hosts of dumped ranks; for a rank without a dump, the host of its block
    of consecutive ranks when every dumped block lives on one host."""
    hosts = dict(ev.hosts)
    missing = [r for r in ev.world if r not in hosts]
    if not missing:
        return hosts
    for k in (64, 32, 16, 8, 4, 2):
        blocks: dict[int, set[str]] = defaultdict(set)
        for r, h in ev.hosts.items():
            blocks[r // k].add(h)
        if all(len(v) == 1 for v in blocks.values()) and len(blocks) > 1:
            for r in missing:
                if r // k in blocks:
                    hosts[r] = next(iter(blocks[r // k]))
            break
    return hosts


def _progress(ev: Evidence) -> list[dict]:
    out = []
    for pg, ranks in sorted(ev.members.items()):
        last = {r: ev.last_seq.get((r, pg)) for r in ranks}
        known = [s for s in last.values() if s is not None]
        frontier = max(known) if known else None  # once per group: a 16,384-rank group made it quadratic
        out.append({
            "pg": pg, "pg_desc": ev.desc.get(pg), "ranks": ranks,
            "last_enqueued": {str(r): s for r, s in last.items()},
            "frontier": frontier,
            "behind": sorted(r for r, s in last.items() if known and (s is None or s < frontier)),
        })
    return out


def summarize(d: Diagnosis) -> str:
    root = d.root
    if d.verdict is Verdict.HEALTHY:
        return f"{d.job} attempt {d.attempt}: healthy ({len(d.ranks_dumped)} ranks dumped, no hang, mismatch or straggler)."
    if root is None:
        return f"{d.job} attempt {d.attempt}: {d.verdict}."
    where = f" in {root.pg_desc or 'pg'} {root.pg} at seq {root.seq} ({root.op})" if root.pg is not None else ""
    host = root.host or "unknown host"
    if d.verdict is Verdict.MISMATCH:
        return (f"{d.job} attempt {d.attempt}: {root.reason.replace('_', ' ')}{where}: rank {root.rank} on {host} "
                f"sent {root.found}, the others {root.expected}.")
    if d.verdict is Verdict.HANG:
        what = "left no dump (crashed?)" if root.reason == "no_dump" else "never joined"
        return f"{d.job} attempt {d.attempt}: hang{where}: rank {root.rank} on {host} {what}; {root.waiters} rank(s) wait for it."
    if d.verdict is Verdict.STRAGGLER:
        return (f"{d.job} attempt {d.attempt}: straggler: rank {root.rank} on {host} arrives "
                f"{root.lateness_ms:.1f} ms late to collectives, first in the chain.")
    return f"{d.job} attempt {d.attempt}: incomplete: no dump from rank(s) {', '.join(map(str, d.ranks_missing_dump))}."
