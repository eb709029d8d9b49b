"""What kind of failure an attempt's incident was (frlake.entities.Kind), from the evidence its verdict rests on.

- **misconfigured**: the members of a collective disagree on its op, sizes or dtypes (a mismatch);
- **stuck in a collective**: every member enqueued it and it never completed: a hang with no missing member
  (``Diagnosis.stuck``), a root cause that is itself inside a collective all its group enqueued, or members
  that disagree only on its state (some started the kernel, some never did: what their GPUs still run);
- **CPU-side**: the rank the others wait for never enqueued the collective (its host side stopped before it:
  Python, data loading, a checkpoint), or left no dump (a dead process or host: weaker evidence);
- **slow**: a straggler (the job went on);
- **unknown**: ranks left no dump and nothing waits for them, or the dumps record nothing.

``kind_why`` is one sentence that starts with the evidence that decided it; where the root cause is a
suspect or its evidence weaker, it says so."""

from __future__ import annotations

from frlake.diagnose.evidence import Evidence
from frlake.diagnose.words import ranks_text, seconds_text
from frlake.entities import Culprit, Diagnosis, Kind, Verdict

_MISCONFIGURED = ("type_mismatch", "size_mismatch", "dtype_mismatch")


def kind_of(diag: Diagnosis, ev: Evidence) -> tuple[Kind | None, str | None]:
    """The kind of the attempt's failure and why (None for a healthy attempt)."""
    root = diag.root
    if diag.verdict is Verdict.HEALTHY:
        return None, None
    if diag.verdict is Verdict.INCOMPLETE:
        if diag.records_nothing:
            why = "the dumps record no collective, so what happened they cannot tell"
        elif diag.waiting_for_dumps:
            why = f"only {len(diag.ranks_dumped)} of {diag.world_size} ranks dumped so far"
        else:
            why = (f"rank(s) {ranks_text(diag.ranks_missing_dump)} left no dump and nothing in the others' dumps "
                   "waits for them")
        return Kind.UNKNOWN, why
    if diag.verdict is Verdict.STRAGGLER:
        return Kind.SLOW, (f"rank {root.rank} is first to arrive late to its collectives again and again "
                           f"({root.lateness_ms:.1f} ms): it enqueues them late, and the job goes on")
    if diag.stuck is not None:
        s = diag.stuck
        return Kind.STUCK, (
            f"every one of the {s['members']} members of {s['pg_desc'] or 'pg'} {s['pg']} enqueued seq {s['seq']} "
            f"({s['op']}) and none completed it{pending_words(s)}: no rank is missing from it")
    if diag.verdict is Verdict.MISMATCH:
        if root.reason in _MISCONFIGURED:
            return Kind.MISCONFIGURED, (
                f"rank {root.rank} {_disagree(root)} at seq {root.seq} of {root.pg_desc or 'pg'} {root.pg}"
                f"{_weaker(root)}")
        return Kind.STUCK, (f"every member enqueued seq {root.seq} of {root.pg_desc or 'pg'} {root.pg} "
                            f"({root.op}) and they disagree only on its state (rank {root.rank} {root.found}, the "
                            f"others {root.expected}): some never started it, held by what their GPUs still run"
                            f"{_weaker(root)}")
    if root is None:
        return Kind.UNKNOWN, "the verdict names no root cause"
    inside = _inside(root, ev)
    if inside is not None:
        return Kind.STUCK, (f"rank {root.rank}, which {root.waiters} rank(s) wait for, is itself inside seq "
                            f"{inside.seq} of {inside.pg_desc or 'pg'} {ev.name(inside.pg)} ({inside.op}), which "
                            f"every member of that group enqueued and holds pending{_weaker(root)}")
    if root.reason == "no_dump":
        return Kind.CPU_SIDE, (f"rank {root.rank} left no dump while {root.waiters} rank(s) wait for it: a dead process "
                               f"or host (weaker evidence: only its absence speaks){_suspect(root)}")
    where = f"seq {root.seq} of {root.pg_desc or 'pg'} {root.pg}" + (f" ({root.op})" if root.op else "")
    if root.evidence == "unnamed_peer":
        return Kind.CPU_SIDE, (f"rank {root.rank} waits in no op while {root.waiters} rank(s) wait in sends or recvs "
                               f"of its group (weaker evidence: the dumps do not name their peer){_suspect(root)}")
    return Kind.CPU_SIDE, (f"rank {root.rank} never enqueued {where}, which {root.waiters} rank(s) wait in: its host "
                           f"side stopped before the collective{_weaker(root)}")


def _inside(root: Culprit, ev: Evidence):
    """The collective a hang's root cause is itself stuck in, where it holds one pending that every member of
    its group enqueued (a rank inside a collective of another group holds up its own group): else None."""
    last = ev.last.get(root.rank)
    if last is None or last.is_p2p or last.pg is None or last.state == "completed":
        return None
    tail = ev.pending_tail.get(last.pg)
    members = ev.members.get(last.pg, [])
    if tail is None or tail.seq != last.seq or root.rank not in tail.waiting or set(tail.waiting) != set(members):
        return None
    return tail


def _disagree(c: Culprit) -> str:
    what = {"type_mismatch": "op", "size_mismatch": "sizes", "dtype_mismatch": "dtypes"}[c.reason]
    return f"sent {what} {c.found} where the others sent {c.expected}"


def pending_words(s: dict) -> str:
    if s.get("pending_s") is None:
        return " past its timeout"
    timeout = f", its timeout {seconds_text(s['timeout_s'])}" if s.get("timeout_s") is not None else ""
    return f" (pending {seconds_text(s['pending_s'])} when dumped{timeout})"


def _suspect(c: Culprit) -> str:
    return "; a suspect, not a proven cause" if c.role == "suspect" else ""


def _weaker(c: Culprit) -> str:
    label = {"pending_tail": "weaker evidence: from the pending tail", "pg_status": "weaker evidence: pg_status "
             "only", "no_dump": "weaker evidence: no dump"}.get(c.evidence or "")
    return (f" ({label})" if label else "") + _suspect(c)
