"""Diagnose one attempt: verdict and culprits, root cause first."""

from __future__ import annotations

import time
from collections import defaultdict

import duckdb

from frlake.diagnose import hang, mismatch, straggler
from frlake.diagnose.evidence import Evidence, load, stacks
from frlake.diagnose.model import Culprit, Diagnosis


def diagnose_attempt(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> Diagnosis:
    started = time.perf_counter()
    ev = load(con, job, attempt)
    missing_dump = [r for r in ev.world if r not in ev.hosts]
    hosts = _hosts_with_inferred(ev)
    diag = Diagnosis(job=job, attempt=attempt, verdict="healthy", world_size=len(ev.world),
                     ranks_dumped=sorted(ev.hosts), ranks_missing_dump=missing_dump, groups=_progress(ev))
    stack_of_last = {r: e.stack_id for r, e in ev.last.items()}
    diag.several_dumps = [{"rank": r, "dumps": n} for r, n in sorted(ev.several_dumps.items())]

    mismatches = mismatch.find(con, ev)
    stalls = hang.stalls(ev)
    if not mismatches and not any(s.role == "root" for s in stalls):
        mismatches = mismatch.states(con)  # the weakest evidence: only when nothing else explains the attempt
    slow = None
    if not mismatches and not any(s.role == "root" for s in stalls):
        # lateness only means something in an attempt that did not hang
        slow, lateness = straggler.analyze(con)
        diag.rank_lateness = [dict(vars(r), host=hosts.get(r.rank)) for r in lateness]
    if mismatches:
        diag.verdict = "mismatch"
        for m in mismatches:
            diag.culprits.append(Culprit(m.rank, hosts.get(m.rank), m.reason, "root", m.pg, m.pg_desc, m.seq, m.op,
                                         expected=m.expected, found=m.found, stack=m.stack_id))  # type: ignore[arg-type]
        seen = {c.rank for c in diag.culprits}
        diag.culprits += [_stall_culprit(s, hosts, stack_of_last, role="victim") for s in stalls if s.rank not in seen]
    elif any(s.role == "root" for s in stalls):
        diag.verdict = "hang"
        diag.culprits = [_stall_culprit(s, hosts, stack_of_last) for s in stalls]
    elif missing_dump:
        diag.verdict = "incomplete"
        diag.culprits = [Culprit(r, hosts.get(r), "no_dump", "root", detail="no dump file from this rank")
                         for r in missing_dump]
    else:
        s = slow
        if s is not None:
            diag.verdict = "straggler"
            diag.culprits = [Culprit(s.rank, hosts.get(s.rank), "straggler", "root", s.pg, s.pg_desc, s.seq, s.op,
                                     lateness_ms=s.lateness_ms, stack=s.stack_id,  # type: ignore[arg-type]
                                     detail=f"first to arrive late in {s.root_events} of {s.total_root_events} "
                                            f"unexplained late arrivals")]
    _attach_stacks(con, diag)
    diag.summary = summarize(diag)
    diag.seconds = round(time.perf_counter() - started, 4)
    return diag


def _stall_culprit(s: hang.Stall, hosts: dict[int, str], stack_of_last: dict[int, int | None], role: str | None = None) -> Culprit:
    detail = (f"{s.waiters} rank(s) wait for it" if s.role == "root" else "behind, waiting for another rank")
    return Culprit(s.rank, hosts.get(s.rank), s.reason, role or s.role, s.pg, s.pg_desc, s.seq, s.op,
                   waiters=s.waiters, stack=stack_of_last.get(s.rank), detail=detail)  # type: ignore[arg-type]


def _attach_stacks(con: duckdb.DuckDBPyConnection, diag: Diagnosis) -> None:
    ids = [c.stack for c in diag.culprits if isinstance(c.stack, int)]
    frames = stacks(con, ids)
    for c in diag.culprits:
        c.stack = frames.get(c.stack) if isinstance(c.stack, int) else None  # type: ignore[arg-type]


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
        out.append({
            "pg": pg, "pg_desc": ev.desc.get(pg), "ranks": ranks,
            "last_enqueued": {str(r): s for r, s in last.items()},
            "frontier": max(known) if known else None,
            "behind": sorted(r for r, s in last.items() if known and (s is None or s < max(known))),
        })
    return out


def summarize(d: Diagnosis) -> str:
    root = d.root
    if d.verdict == "healthy":
        return f"{d.job} attempt {d.attempt}: healthy ({len(d.ranks_dumped)} ranks dumped, no hang, mismatch or straggler)."
    if root is None:
        return f"{d.job} attempt {d.attempt}: {d.verdict}."
    where = f" in {root.pg_desc or 'pg'} {root.pg} at seq {root.seq} ({root.op})" if root.pg is not None else ""
    host = root.host or "unknown host"
    if d.verdict == "mismatch":
        return (f"{d.job} attempt {d.attempt}: {root.reason.replace('_', ' ')}{where}: rank {root.rank} on {host} "
                f"sent {root.found}, the others {root.expected}.")
    if d.verdict == "hang":
        what = "left no dump (crashed?)" if root.reason == "no_dump" else "never joined"
        return f"{d.job} attempt {d.attempt}: hang{where}: rank {root.rank} on {host} {what}; {root.waiters} rank(s) wait for it."
    if d.verdict == "straggler":
        return (f"{d.job} attempt {d.attempt}: straggler: rank {root.rank} on {host} arrives "
                f"{root.lateness_ms:.1f} ms late to collectives, first in the chain.")
    return f"{d.job} attempt {d.attempt}: incomplete: no dump from rank(s) {', '.join(map(str, d.ranks_missing_dump))}."
