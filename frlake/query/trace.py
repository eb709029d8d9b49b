"""One attempt as a Chrome/Perfetto trace (trace-event JSON), in a window.

A 16,384-rank attempt holds 16M+ entries: far too many to open. So a trace
is a window: some ranks (by default the culprits and the members of the
hung group nearest them), optionally some process groups, optionally N
collectives of the hung group on each side of the hang, and never more than
``max_events`` events in all. The hang and the culprit are marked: a global
instant at the hang, a "stalled" slice on each root culprit from its last
entry to the dump, an instant where it stopped, and a flow arrow from each
waiter's pending op to the rank it waits for.

Durations are real where the dump has them: ``duration_ms`` (NCCL with
TORCH_NCCL_ENABLE_TIMING), else the watchdog's ``time_discovered_completed_ns``;
an op that never completed lasts until the dump; a completed op with no
timing at all (gloo) gets the gap to the rank's next op, an upper bound, and
every event says in ``args.dur_source`` which of these it is.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import duckdb

from frlake.entities import Diagnosis
from frlake.query.attempt import near_the_culprits, neighbourhood
from frlake.query.vocabulary import NEWEST_DUMP, STATE_OF

DEFAULT_MAX_EVENTS = 100_000
DEFAULT_MAX_RANKS = 64  # ranks of the default window (the culprits and their neighbours)
MAX_FLOWS = 256  # waiters given an arrow to their culprit
# a dump's write time (snapshots.written_ns) ends its pending ops only when it follows its last entry by less than this
_PLAUSIBLE_DUMP_DELAY_NS = 24 * 3600 * 10**9
_MIN_VISIBLE_US = 1000.0  # a pending op is shown at least 1 ms long
# torchcomms' retired entries are completed ones, as the diagnosis reads them
_STATE = STATE_OF.format(e="e")
# the dump the diagnosis reads for each rank (the newest: see frlake.query.vocabulary.NEWEST_DUMP)
_NEWEST_DUMPS = f"""
    SELECT d.rank, d.host, d.dump_id, d.last_time_created_ns, s.written_ns
    FROM dumps d LEFT JOIN (SELECT * FROM snapshots WHERE job = $job AND attempt = $attempt) s USING (dump_id)
    WHERE d.job = $job AND d.attempt = $attempt
    QUALIFY row_number() OVER (PARTITION BY d.rank ORDER BY {NEWEST_DUMP}) = 1"""


@dataclass(frozen=True)
class TraceWindow:
    """What part of an attempt a trace holds (every field optional).

    ``ranks``: these ranks; ``pgs``: only these process groups (names or
    descriptions), and by default only their members; ``around``: only
    the time from ``around`` collectives of the hung group before the hang
    to ``around`` after it; ``max_events``: the cap on all events (those
    nearest the hang are kept)."""

    ranks: tuple[int, ...] | None = None
    pgs: tuple[str, ...] | None = None
    around: int | None = None
    max_events: int = DEFAULT_MAX_EVENTS
    max_ranks: int = DEFAULT_MAX_RANKS


@dataclass
class _Plan:
    ranks: list[int]
    ranks_total: int
    pg_names: list[str] | None
    focus: dict | None  # the root culprit: rank, pg, seq, op, reason
    t_hang: int | None
    t_lo: int | None
    t_hi: int | None
    t_end: int | None
    hosts: dict[int, str | None] = field(default_factory=dict)
    dump_end: dict[int, int] = field(default_factory=dict)
    tracks: dict[int, list[str]] = field(default_factory=dict)  # rank -> "desc:pg" labels
    culprits: set[int] = field(default_factory=set)  # root culprits among the ranks


def trace_events(con: duckdb.DuckDBPyConnection, job: str, attempt: int, window: TraceWindow = TraceWindow(),
                 diagnosis: Diagnosis | None = None, batch: int = 20_000) -> Iterator[str]:
    """The window of the attempt as trace-event JSON, streamed in pieces
    (``{"displayTimeUnit", "otherData", "traceEvents"}``)."""
    if window.max_events < 1:
        raise ValueError("max_events must be at least 1")
    plan = _plan(con, job, attempt, window, diagnosis)
    meta = list(_meta_events(plan))
    markers, flows = _markers(con, job, attempt, plan, diagnosis)
    # the cap holds for everything: metadata and markers first, the entries get the rest
    fixed = meta + markers + flows
    while len(fixed) > window.max_events // 2 and len(plan.ranks) > 1:
        keep = set(neighbourhood(plan.ranks, [plan.focus["rank"]] if plan.focus else [], len(plan.ranks) // 2))
        plan.ranks = [r for r in plan.ranks if r in keep]
        meta = list(_meta_events(plan))
        markers, flows = _markers(con, job, attempt, plan, diagnosis)
        fixed = meta + markers + flows
    budget = max(0, window.max_events - len(fixed))
    where, params = _entry_filter(job, attempt, plan)
    available = con.execute(f"SELECT count(*) FROM ({where})", params).fetchone()[0]
    other = {
        "frlake": {
            "job": job, "attempt": attempt, "ranks": plan.ranks, "ranks_total": plan.ranks_total,
            "pgs": plan.pg_names, "around": window.around, "max_events": window.max_events,
            "focus": plan.focus, "t_hang_ns": plan.t_hang, "window_ns": [plan.t_lo, plan.t_hi],
            "entries_in_window": available, "entries_shown": min(available, budget),
            "truncated": available > budget or len(plan.ranks) < plan.ranks_total,
        }
    }
    yield '{"displayTimeUnit": "ms", "otherData": ' + json.dumps(other) + ', "traceEvents": [\n'
    first = True
    for ev in fixed:
        yield ("" if first else ",\n") + json.dumps(ev)
        first = False
    if budget:
        cur = con.execute(_events_sql(where, plan), params | {"budget": budget})
        while rows := cur.fetchmany(batch):
            parts = [json.dumps(_x_event(row, plan)) for row in rows]
            yield ("" if first else ",\n") + ",\n".join(parts)
            first = False
    yield "\n]}\n"


def _plan(con, job: str, attempt: int, window: TraceWindow, diagnosis: Diagnosis | None) -> _Plan:
    params = {"job": job, "attempt": attempt}
    dumps = con.execute(
        f"SELECT rank, host, last_time_created_ns, written_ns FROM ({_NEWEST_DUMPS})", params).fetchall()
    hosts = {r: h for r, h, _, _ in dumps}
    root = next((c for c in diagnosis.culprits if c.role == "root"), None) if diagnosis else None
    focus = None if root is None else {"rank": root.rank, "host": root.host, "pg": root.pg, "pg_desc": root.pg_desc,
                                       "seq": root.seq, "op": root.op, "reason": root.reason}
    groups = con.execute(
        "SELECT DISTINCT pg_name, pg_desc FROM entries WHERE job = $job AND attempt = $attempt", params).fetchall()
    pg_names = None
    if window.pgs:
        wanted = set(window.pgs)
        pg_names = sorted({name for name, desc in groups if name in wanted or desc in wanted})
    members = _group_members(diagnosis)
    dumped = sorted(hosts)
    if window.ranks:
        candidates = sorted(set(window.ranks) & set(dumped))
        ranks = candidates
    else:
        if pg_names is not None:
            candidates = sorted({r for pg in pg_names for r in members.get(pg, ())} & set(dumped)) or \
                [r for (r,) in con.execute(
                    "SELECT DISTINCT rank FROM entries WHERE job = $job AND attempt = $attempt "
                    "AND list_contains($pgs, pg_name) ORDER BY 1", params | {"pgs": pg_names}).fetchall()]
        else:
            candidates = dumped
        hung = members.get(focus["pg"]) if focus and pg_names is None else None
        ranks = near_the_culprits(candidates, diagnosis, window.max_ranks, hung)
    # the hung collective: its first arrival is the hang; the window is counted in its group's collectives
    fpg, fseq = (focus["pg"], focus["seq"]) if focus and focus["pg"] is not None else (None, None)
    if fpg is None:
        row = con.execute(
            """SELECT pg_name, max(collective_seq_id) FROM entries WHERE job = $job AND attempt = $attempt
               AND NOT is_p2p AND collective_seq_id IS NOT NULL
               GROUP BY pg_name ORDER BY count(DISTINCT rank) DESC, pg_name LIMIT 1""", params).fetchone()
        fpg, fseq = row if row else (None, None)
    t_hang = t_lo = t_hi = None
    if fpg is not None and fseq is not None:
        p = params | {"pg": fpg, "seq": fseq, "n": window.around or 0}
        t_hang, t_lo, t_hi = con.execute(
            """SELECT min(t) FILTER (WHERE seq = $seq), min(t) FILTER (WHERE seq >= $seq - $n),
                      min(t) FILTER (WHERE seq > $seq + $n)
               FROM (SELECT collective_seq_id AS seq, time_created_ns AS t FROM entries
                     WHERE job = $job AND attempt = $attempt AND pg_name = $pg AND NOT is_p2p)""", p).fetchone()
        if window.around is None:
            t_lo = t_hi = None
    t_end = con.execute(
        """SELECT max(greatest(time_created_ns, coalesce(time_discovered_started_ns, 0),
                               coalesce(time_discovered_completed_ns, 0)))
           FROM entries WHERE job = $job AND attempt = $attempt""", params).fetchone()[0]
    if t_hang is None:
        t_hang = t_end
    dump_end = {}
    for r, _, last_t, written in dumps:  # written: a time in the file's name, else an mtime known to be the dump's
        plausible = last_t is not None and written is not None and 0 <= written - last_t <= _PLAUSIBLE_DUMP_DELAY_NS
        end = written if plausible else t_end
        if end is not None:
            dump_end[r] = end
    plan = _Plan(ranks, len(candidates), pg_names, focus, t_hang, t_lo, t_hi, t_end, hosts, dump_end)
    plan.culprits = {c.rank for c in diagnosis.culprits if c.role == "root"} & set(ranks) if diagnosis else set()
    if ranks:
        rows = con.execute(
            f"""SELECT rank, list(DISTINCT coalesce(pg_desc, '') || ':' || pg_name ORDER BY 1) FROM entries
                WHERE job = $job AND attempt = $attempt AND rank IN ({_int_list(ranks)})
                {"AND list_contains($pgs, pg_name)" if pg_names is not None else ""} GROUP BY rank""",
            params | ({"pgs": pg_names} if pg_names is not None else {}),
        ).fetchall()
        plan.tracks = dict(rows)
    return plan


def _group_members(diagnosis: Diagnosis | None) -> dict[str, list[int]]:
    """Each group's members by name (disjoint groups that share a name, split_group, together)."""
    out: dict[str, set[int]] = {}
    for g in diagnosis.groups if diagnosis else ():
        out.setdefault(g["pg"], set()).update(g.get("ranks") or ())
    return {pg: sorted(ranks) for pg, ranks in out.items()}


def _int_list(values: list[int]) -> str:
    return ", ".join(str(int(v)) for v in values) or "NULL"


def _track(plan: _Plan, rank: int, pg: str | None) -> int:
    labels = plan.tracks.get(rank, [])
    for tid, label in enumerate(labels, 1):
        if label.split(":", 1)[1] == pg:
            return tid
    return 0


def _meta_events(plan: _Plan) -> Iterator[dict]:
    for rank in plan.ranks:
        yield {"ph": "M", "name": "process_name", "pid": rank,
               "args": {"name": f"rank {rank} ({plan.hosts.get(rank)})"}}
        yield {"ph": "M", "name": "process_sort_index", "pid": rank, "args": {"sort_index": rank}}
        if rank in plan.culprits:
            yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": 0, "args": {"name": "frlake: culprit"}}
        for tid, label in enumerate(plan.tracks.get(rank, []), 1):
            yield {"ph": "M", "name": "thread_name", "pid": rank, "tid": tid, "args": {"name": f"pg {label}"}}


def _markers(con, job: str, attempt: int, plan: _Plan, diagnosis: Diagnosis | None) -> tuple[list[dict], list[dict]]:
    """The hang (a global instant), each root culprit shown (an instant where it
    stopped and a slice until the dump) and flows from the waiters shown."""
    focus = plan.focus
    if focus is None or diagnosis is None:
        return [], []
    us = _us
    markers: list[dict] = []
    what = f"{focus['pg_desc'] or 'pg'} {focus['pg']} seq {focus['seq']} ({focus['op']})"
    if plan.t_hang is not None and focus["pg"] is not None:
        markers.append({"ph": "i", "s": "g", "name": f"hang: {what}", "cat": "frlake.hang", "pid": focus["rank"],
                        "tid": 0, "ts": us(plan.t_hang), "args": {"summary": diagnosis.summary}})
    shown = set(plan.ranks)
    roots = [c for c in diagnosis.culprits if c.role == "root" and c.rank in shown]
    last = {}
    if roots:
        last = {r: (t, pg) for r, t, pg in con.execute(
            f"""SELECT rank, max(time_created_ns), arg_max(pg_name, time_created_ns) FROM entries
                WHERE job = $job AND attempt = $attempt AND rank IN ({_int_list([c.rank for c in roots])})
                GROUP BY rank""", {"job": job, "attempt": attempt}).fetchall()}
    stall_at: dict[int, float] = {}
    for c in roots:
        t_last, _ = last.get(c.rank, (None, None))
        start = t_last if t_last is not None else plan.t_hang
        if start is None:
            continue
        end = plan.dump_end.get(c.rank, plan.t_end) or start
        what_c = {"missing": "never joined", "no_dump": "left no dump before"}.get(c.reason, c.reason)
        name = f"culprit: rank {c.rank} ({c.host}) {what_c}" + (f" {c.pg_desc or 'pg'} {c.pg} seq {c.seq}" if c.pg else "")
        markers.append({"ph": "i", "s": "p", "name": name, "cat": "frlake.culprit", "pid": c.rank, "tid": 0,
                        "ts": us(start), "args": {"reason": c.reason, "detail": c.detail, "waiters": c.waiters}})
        markers.append({"ph": "X", "name": f"stalled: never joined {c.pg_desc or 'pg'} {c.pg} seq {c.seq}"
                        if c.reason == "missing" else f"culprit: {c.reason}", "cat": "frlake.culprit",
                        "pid": c.rank, "tid": 0, "ts": us(start), "dur": max(us(end) - us(start), _MIN_VISIBLE_US),
                        "args": {"from": "the culprit's last entry", "until": "the dump"}})
        stall_at[c.rank] = us(start)
    flows: list[dict] = []
    if stall_at and focus["pg"] is not None and focus["seq"] is not None and focus["rank"] in stall_at:
        waiters = [r for r in plan.ranks if r not in stall_at]
        rows = con.execute(
            f"""SELECT rank, min(time_created_ns) FROM entries WHERE job = $job AND attempt = $attempt
                AND pg_name = $pg AND NOT is_p2p AND collective_seq_id = $seq AND rank IN ({_int_list(waiters)})
                GROUP BY rank ORDER BY rank LIMIT {MAX_FLOWS}""",
            {"job": job, "attempt": attempt, "pg": focus["pg"], "seq": focus["seq"]},
        ).fetchall() if waiters else []
        target = focus["rank"]
        for i, (rank, t) in enumerate(rows, 1):
            ts = us(t)
            flows.append({"ph": "s", "id": i, "name": f"waits for rank {target}", "cat": "frlake.wait", "pid": rank,
                          "tid": _track(plan, rank, focus["pg"]), "ts": ts})
            flows.append({"ph": "f", "bp": "e", "id": i, "name": f"waits for rank {target}", "cat": "frlake.wait",
                          "pid": target, "tid": 0, "ts": max(ts, stall_at[target])})
    return markers, flows


def _us(ns: int | None) -> float:
    return 0.0 if ns is None else ns / 1000


def _entry_filter(job: str, attempt: int, plan: _Plan) -> tuple[str, dict]:
    """The entries of the window (before the cap), each with its rank's next op."""
    params = {"job": job, "attempt": attempt, "t_lo": plan.t_lo, "t_hi": plan.t_hi}
    pgs = ""
    if plan.pg_names is not None:
        pgs = "AND list_contains($pgs, pg_name)"
        params["pgs"] = plan.pg_names
    where = f"""
        SELECT * FROM (
          SELECT e.rank, e.entry_index, e.pg_name, e.profiling_name, e.collective_seq_id, e.p2p_seq_id,
                 {_STATE} AS state,
                 e.time_created_ns, e.duration_ms, e.time_discovered_started_ns, e.time_discovered_completed_ns,
                 e.input_sizes::VARCHAR AS sizes, e.input_dtypes::VARCHAR AS dtypes, e.record_id,
                 lead(e.time_created_ns) OVER (PARTITION BY e.rank ORDER BY e.entry_index) AS next_t
          FROM entries e
          WHERE e.job = $job AND e.attempt = $attempt AND e.rank IN ({_int_list(plan.ranks)})
            AND e.dump_id IN (SELECT dump_id FROM ({_NEWEST_DUMPS}))
            AND ($t_lo::BIGINT IS NULL OR e.time_created_ns >= $t_lo)
        ) WHERE ($t_hi::BIGINT IS NULL OR time_created_ns < $t_hi) {pgs}"""
    return where, params


def _events_sql(where: str, plan: _Plan) -> str:
    hang = "NULL" if plan.t_hang is None else str(int(plan.t_hang))
    return f"""
        SELECT * FROM (
          SELECT * FROM ({where})
          ORDER BY abs(coalesce(time_created_ns, 0) - coalesce({hang}::BIGINT, 0)), rank, entry_index
          LIMIT $budget
        ) ORDER BY rank, entry_index
    """


def _x_event(row: tuple, plan: _Plan) -> dict:
    (rank, _idx, pg, name, seq, p2p_seq, state, t, duration_ms, started, completed, sizes, dtypes, record,
     next_t) = row
    if duration_ms is not None:
        dur, source = duration_ms * 1000, "duration_ms"
    elif completed is not None and t is not None:
        dur, source = (completed - t) / 1000, "time_discovered_completed_ns"
    elif state in ("scheduled", "started") and t is not None:
        end = plan.dump_end.get(rank, plan.t_end) or t
        dur, source = max((end - t) / 1000, _MIN_VISIBLE_US), "pending until the dump"
    elif next_t is not None and t is not None:
        dur, source = (next_t - t) / 1000, "gap to the next op: an upper bound, the dump has no timing"
    else:
        dur, source = 1.0, "unknown: the dump has no timing"
    return {
        "ph": "X", "name": name, "cat": state or "", "pid": rank, "tid": _track(plan, rank, pg),
        "ts": _us(t), "dur": max(float(dur), 1.0),
        "args": {"pg": pg, "seq": seq, "p2p_seq": p2p_seq, "state": state, "sizes": sizes, "dtypes": dtypes,
                 "record_id": record, "dur_source": source,
                 "time_discovered_started_ns": started, "time_discovered_completed_ns": completed},
    }
