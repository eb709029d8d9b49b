"""One attempt seen closely: who arrived late or never arrived, and where
each group stands. At 16,384 ranks nothing here shows every rank: the views
centre on the diagnosis' culprits and the ranks waiting for them."""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass, replace

import duckdb

from frlake.entities import Culprit, Diagnosis
from frlake.values import Record

MAX_GROUPS_LISTED = 64  # groups offered to pick from (the culprits' first, then the largest)


@dataclass(frozen=True)
class GroupChoice(Record):
    """A process group the arrivals chart can show."""

    pg: str
    pg_desc: str | None
    size: int
    culprit: bool  # a culprit of the diagnosis is in it


@dataclass(frozen=True)
class CulpritMark(Record):
    """A culprit as the arrivals chart marks it."""

    rank: int
    host: str | None
    role: str
    reason: str
    pg: str | None
    seq: int | None
    op: str | None
    waiters: int | None


@dataclass(frozen=True)
class Focus(Record):
    """The collective the chart is centred on: the root culprit's."""

    rank: int
    pg: str | None
    seq: int | None
    op: str | None


@dataclass(frozen=True)
class ArrivalsWindow:
    """Which arrivals to show: a group (None: the root culprit's, else the largest), ``last`` collectives
    (``seq_from``..``seq_to``, or centred on ``around``, else up to the culprit's), at most ``max_ranks``."""

    pg: str | None = None
    last: int = 40
    max_ranks: int = 256
    seq_from: int | None = None
    seq_to: int | None = None
    around: int | None = None


@dataclass(frozen=True)
class Arrivals(Record):
    """Who arrived late or never at a window of one group's collectives (:func:`arrivals`). ``late_ms`` and
    ``created_ms``: one row per rank of ``ranks``, one cell per sequence id of ``seqs`` (None: no entry)."""

    job: str
    attempt: int
    pg: str | None
    pg_desc: str | None = None
    seqs: tuple[int, ...] = ()
    ranks: tuple[int, ...] = ()
    late_ms: tuple[tuple[float | None, ...], ...] = ()
    missing: tuple[tuple[int, int], ...] = ()  # (rank, seq) a rank that dumped has no entry for
    no_dump: tuple[int, ...] = ()  # ranks shown that left no dump: their arrival is unknown
    groups: tuple[GroupChoice, ...] = ()
    groups_total: int = 0
    culprits: tuple[CulpritMark, ...] = ()
    waiting: tuple[int, ...] = ()
    focus: Focus | None = None
    members: int = 0
    ranks_total: int = 0
    ranks_truncated: bool = False
    seqs_total: int = 0
    seq_window: tuple[int, int] | None = None
    t0_ns: int | None = None
    created_ms: tuple[tuple[float | None, ...], ...] = ()
    error: str | None = None  # why the window asked for could not be shown (a page shows the default one)

    def to_dict(self) -> dict:
        d = super().to_dict()
        if self.error is None:
            del d["error"]
        return d


@dataclass(frozen=True)
class RankProgress(Record):
    rank: int
    host: str | None
    last_enqueued: int | None
    last_started: int | None
    last_completed: int | None


@dataclass(frozen=True)
class GroupProgress(Record):
    """Where each rank of one process group stands (:func:`progress`)."""

    pg: str
    pg_desc: str | None
    ranks: tuple[RankProgress, ...]


def neighbourhood(members: Sequence[int], centre: Sequence[int], n: int) -> list[int]:
    """At most ``n`` of the sorted ``members``: every member of ``centre``
    first, then the members nearest to them in rank order (alternating
    below and above), so a culprit at rank 12,000 comes with its neighbours
    rather than with ranks 0-255."""
    if len(members) <= n:
        return list(members)
    chosen: list[int] = []
    seen: set[int] = set()
    for r in centre:
        if r not in seen and len(chosen) < n and _contains(members, r):
            chosen.append(r)
            seen.add(r)
    anchors = [bisect.bisect_left(members, r) for r in chosen] or [0]
    step = 0
    while len(chosen) < n and step <= len(members):
        for a in anchors:
            for i in ((a - step, a + step) if step else (a,)):
                if 0 <= i < len(members) and members[i] not in seen and len(chosen) < n:
                    chosen.append(members[i])
                    seen.add(members[i])
        step += 1
    return sorted(chosen)


def near_the_culprits(candidates: Sequence[int], diagnosis: Diagnosis | None, n: int,
                      hung_group: Sequence[int] | None = None) -> list[int]:
    """At most ``n`` of the sorted ``candidates``, as the windows of one attempt
    (trace, entries) choose them: the root culprits, then the members of the
    hung group (``hung_group``) nearest them, then their other neighbours."""
    centre = [c.rank for c in diagnosis.culprits if c.role == "root"][:n] if diagnosis else []
    if hung_group:
        near = neighbourhood(sorted(set(hung_group) & set(candidates)), centre, n)
        centre = centre + [r for r in near if r not in centre]
    return neighbourhood(candidates, centre, n)


def _contains(sorted_list: Sequence[int], value: int) -> bool:
    i = bisect.bisect_left(sorted_list, value)
    return i < len(sorted_list) and sorted_list[i] == value


def _culprit_marks(culprits: Sequence[Culprit]) -> tuple[CulpritMark, ...]:
    return tuple(CulpritMark(c.rank, c.host, c.role, c.reason, c.pg, c.seq, c.op, c.waiters) for c in culprits)


def _members(con: duckdb.DuckDBPyConnection, job: str, attempt: int, pg: str,
             diagnosis: Diagnosis | None) -> list[int]:
    """The group's members: the diagnosis has them (from every rank's
    pg_config and what the ranks recorded; disjoint groups that share the
    name together); without one, the catalog's."""
    if diagnosis is not None and diagnosis.groups:
        found = [g for g in diagnosis.groups if g.get("pg") == pg]
        if found:
            return sorted({r for g in found for r in g.get("ranks") or ()})
    params = {"job": job, "attempt": attempt, "pg": pg}
    lists = con.execute(
        "SELECT DISTINCT ranks FROM groups WHERE job = $job AND attempt = $attempt AND pg_name = $pg AND ranks IS NOT NULL",
        params,
    ).fetchall()
    seen = con.execute(
        "SELECT DISTINCT rank FROM entries WHERE job = $job AND attempt = $attempt AND pg_name = $pg AND NOT is_p2p",
        params,
    ).fetchall()
    return sorted({r for (ranks,) in lists for r in ranks} | {r for (r,) in seen})


def _all_groups(con: duckdb.DuckDBPyConnection, job: str, attempt: int,
                diagnosis: Diagnosis | None) -> list[tuple[str, str | None, int]]:
    """(name, description, members) of every process group of the attempt:
    the diagnosis' (one per name), else the ranks' pg_config and, for groups
    no dump configures (gloo), the collectives the ranks recorded."""
    if diagnosis is not None and diagnosis.groups:
        members: dict[str, set[int]] = {}
        desc: dict[str, str | None] = {}
        for g in diagnosis.groups:
            members.setdefault(g["pg"], set()).update(g.get("ranks") or ())
            if desc.get(g["pg"]) is None:
                desc[g["pg"]] = g.get("pg_desc")
        return [(pg, desc[pg], len(ranks)) for pg, ranks in members.items()]
    return con.execute(
        """SELECT pg_name, min(pg_desc), max(n) FROM (
             SELECT pg_name, pg_desc, group_size AS n FROM groups WHERE job = $job AND attempt = $attempt
             UNION ALL
             SELECT pg_name, min(pg_desc), count(DISTINCT rank) FROM entries
             WHERE job = $job AND attempt = $attempt AND NOT is_p2p GROUP BY pg_name
           ) GROUP BY pg_name""",
        {"job": job, "attempt": attempt},
    ).fetchall()


def _groups_offered(groups: list[tuple[str, str | None, int]], culprit_pgs: list[str]) -> tuple[GroupChoice, ...]:
    """The groups a caller may pick (at most ``MAX_GROUPS_LISTED``): the
    culprits' first, then the largest."""
    first = {pg: i for i, pg in enumerate(culprit_pgs)}
    ranked = sorted(groups, key=lambda g: (first.get(g[0], len(first)), -(g[2] or 0), g[1] or "", _natural(g[0])))
    return tuple(GroupChoice(pg, desc, size or 0, pg in first) for pg, desc, size in ranked[:MAX_GROUPS_LISTED])


def _natural(name: str) -> tuple:
    return (0, int(name), "") if name.isdigit() else (1, 0, name)


class UnknownGroup(LookupError):
    """The attempt has no process group by that name."""


def arrivals(con: duckdb.DuckDBPyConnection, job: str, attempt: int, window: ArrivalsWindow = ArrivalsWindow(),
             diagnosis: Diagnosis | None = None) -> Arrivals:
    """Lateness (ms after the first member) of ranks of one process group at
    ``last`` of its collectives, who never arrived (``missing``: ranks whose
    dump lacks the collective) and which ranks left no dump (``no_dump``:
    their arrival is unknown); with the groups to choose another (``groups``,
    the culprits' first, then the largest; ``groups_total`` in all).

    The group: ``window.pg``, else the root culprit's, else the largest; a
    group the attempt does not have is an ``UnknownGroup``. The collectives:
    ``seq_from``..``seq_to`` (the last ``last`` of them), or ``last`` centred
    on ``around``, or by default the ``last`` up to the culprit's sequence id
    (and a few after), else the last ones. The ranks (at most ``max_ranks``):
    the culprits of the group and the members nearest them, then the ranks
    that miss a collective of the window; with no culprit, the ranks that
    miss one, then the lowest."""
    pg, last, max_ranks = window.pg, window.last, window.max_ranks
    params = {"job": job, "attempt": attempt}
    culprits = list(diagnosis.culprits) if diagnosis is not None else _stored_culprits(con, job, attempt)
    culprit_pgs = list(dict.fromkeys(c.pg for c in culprits if c.pg is not None))
    every = _all_groups(con, job, attempt, diagnosis)
    names = {g[0] for g in every}
    groups = _groups_offered(every, [p for p in culprit_pgs if p in names])
    if pg is not None and pg not in names:
        listed = ", ".join(f"{g.pg} ({g.pg_desc})" for g in groups) or "none"
        more = f" and {len(every) - len(groups):,} more" if len(every) > len(groups) else ""
        raise UnknownGroup(f"attempt {attempt} of job {job!r} has no process group {pg!r}; it has {listed}{more}")
    if pg is None:
        pg = next((p for p in culprit_pgs if p in names), groups[0].pg if groups else None)
    empty = Arrivals(job, attempt, pg, groups=groups, groups_total=len(every))
    if pg is None:
        return empty
    params |= {"pg": pg}
    pg_desc = next((g[1] for g in every if g[0] == pg), None)
    in_pg = [c for c in culprits if c.pg == pg]
    focus = in_pg[0] if in_pg else None
    all_seqs = [s for (s,) in con.execute(
        """SELECT DISTINCT collective_seq_id FROM entries WHERE job = $job AND attempt = $attempt AND pg_name = $pg
           AND NOT is_p2p AND collective_seq_id IS NOT NULL ORDER BY 1""",
        params,
    ).fetchall()]
    seqs = _seq_window(all_seqs, last, window.seq_from, window.seq_to, window.around, focus.seq if focus else None)
    members = _members(con, job, attempt, pg, diagnosis)
    if not seqs:
        return replace(empty, pg_desc=pg_desc, members=len(members), ranks_total=len(members))
    params |= {"lo": seqs[0], "hi": seqs[-1]}
    window = """
        e AS (
          SELECT rank, pg_desc, collective_seq_id AS seq, time_created_ns AS t FROM entries
          WHERE job = $job AND attempt = $attempt AND pg_name = $pg AND NOT is_p2p
            AND collective_seq_id BETWEEN $lo AND $hi
        )"""
    grid_sql = f"""
        WITH {window}, first AS (SELECT seq, min(t) AS t0 FROM e GROUP BY seq)
        SELECT e.rank, e.seq, any_value(e.pg_desc), round((min(e.t) - any_value(first.t0)) / 1e6, 3), min(e.t)
        FROM e JOIN first USING (seq) {{where}}
        GROUP BY e.rank, e.seq
    """
    rows = None
    if len(members) <= max_ranks:  # every rank is shown: one pass gives the grid and what each rank reached
        rows = con.execute(grid_sql.format(where=""), params).fetchall()
        by_rank: dict[int, list] = {}
        for r in rows:
            by_rank.setdefault(r[0], []).append(r)
        per_rank = [(rank, len(rs), min((x[4] for x in rs if x[4] is not None), default=None),
                     min((x[2] for x in rs if x[2] is not None), default=None)) for rank, rs in by_rank.items()]
    else:
        # how many of the window's collectives each rank reached: the ranks that miss some stand out
        per_rank = con.execute(f"WITH {window} SELECT rank, count(DISTINCT seq), min(t), min(pg_desc) FROM e "
                               "GROUP BY rank", params).fetchall()
    reached = {r: n for r, n, _, _ in per_rank}
    starts = [t for _, _, t, _ in per_rank if t is not None]
    t0 = min(starts) if starts else None
    dumped = {r for (r,) in con.execute(
        "SELECT DISTINCT rank FROM dumps WHERE job = $job AND attempt = $attempt AND rank IS NOT NULL",
        {"job": job, "attempt": attempt}).fetchall()} | set(reached)
    candidates = sorted(set(members) | set(reached))
    # centred on the culprits, then on the ranks that dumped and still miss a collective of the window
    centre = [c.rank for c in in_pg] + [r for r in candidates if r in dumped and reached.get(r, 0) < len(seqs)]
    ranks = neighbourhood(candidates, centre, max_ranks)
    if rows is None:
        rows = con.execute(grid_sql.format(where="WHERE e.rank IN (SELECT unnest($ranks::INTEGER[]))"),
                           params | {"ranks": ranks}).fetchall()
    shown_ranks = set(ranks)
    grid = {(r[0], r[1]): r for r in rows if r[0] in shown_ranks}
    late = tuple(tuple(grid[(rank, seq)][3] if (rank, seq) in grid else None for seq in seqs) for rank in ranks)
    created = tuple(tuple(round((grid[(rank, seq)][4] - t0) / 1e6, 3) if (rank, seq) in grid and t0 is not None
                          else None for seq in seqs) for rank in ranks)
    no_dump = tuple(rank for rank in ranks if rank not in dumped)  # unknown, not "never arrived": nothing says
    missing = tuple((rank, seq) for rank in ranks if rank in dumped for seq in seqs if (rank, seq) not in grid)
    shown = set(ranks)
    culprit_ranks = {c.rank for c in in_pg}
    waiting = sorted(r for r in ranks if focus is not None and focus.seq is not None and (r, focus.seq) in grid
                     and r not in culprit_ranks)
    return replace(
        empty, pg_desc=pg_desc or min((d for *_, d in per_rank if d is not None), default=None),
        seqs=tuple(seqs), ranks=tuple(ranks), late_ms=late, missing=missing, no_dump=no_dump,
        culprits=tuple(c for c in _culprit_marks(in_pg) if c.rank in shown), waiting=tuple(waiting),
        focus=None if focus is None else Focus(focus.rank, focus.pg, focus.seq, focus.op),
        members=len(members), ranks_total=len(candidates), ranks_truncated=len(ranks) < len(candidates),
        seqs_total=len(all_seqs), seq_window=(seqs[0], seqs[-1]), t0_ns=t0, created_ms=created,
    )


def _seq_window(all_seqs: list[int], last: int, lo: int | None, hi: int | None, around: int | None,
                focus_seq: int | None) -> list[int]:
    """``last`` sequence ids of the group: in [lo, hi] (the last ones), centred on ``around``,
    else ending a little after the culprit's, else the last ones."""
    if lo is not None or hi is not None:
        inside = [s for s in all_seqs if (lo is None or s >= lo) and (hi is None or s <= hi)]
        return inside[-last:]
    centre = around if around is not None else focus_seq
    if centre is None:
        return all_seqs[-last:]
    after = last // 2 if around is not None else min(last // 4, 4)
    i = bisect.bisect_right(all_seqs, centre)
    end = min(len(all_seqs), i + after)
    start = max(0, end - last)
    return all_seqs[start:max(end, min(len(all_seqs), start + last))]


def _stored_culprits(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> list[Culprit]:
    """Without a diagnosis at hand: the catalog's culprits view, if the connection has it."""
    try:
        rows = con.execute(
            """SELECT rank, host, reason, role, pg, pg_desc, seq, op FROM culprits
               WHERE job = $job AND attempt = $attempt ORDER BY position""",
            {"job": job, "attempt": attempt},
        ).fetchall()
    except duckdb.CatalogException:
        return []
    return [Culprit(rank=r, host=h, reason=reason, role=role, pg=pg, pg_desc=d, seq=s, op=op)
            for r, h, reason, role, pg, d, s, op in rows]


def progress(con: duckdb.DuckDBPyConnection, job: str, attempt: int,
             pgs: Sequence[str] | None = None) -> tuple[GroupProgress, ...]:
    """Per process group and rank: the last collective sequence id enqueued,
    started and completed (from the entries, and from pg_status where the
    dump has it), so a stalled group shows who is behind."""
    rows = con.execute(
        """
        WITH e AS (
          SELECT pg_name, any_value(pg_desc) AS pg_desc, rank, any_value(host) AS host, any_value(pg_id) AS pg_id,
                 max(collective_seq_id) AS last_enqueued,
                 max(collective_seq_id) FILTER (WHERE state IN ('started', 'completed')) AS last_started,
                 max(collective_seq_id) FILTER (WHERE state = 'completed') AS last_completed
          FROM entries WHERE job = $job AND attempt = $attempt AND NOT is_p2p
            AND ($pgs::VARCHAR[] IS NULL OR list_contains($pgs::VARCHAR[], pg_name))
          GROUP BY pg_name, rank
        )
        SELECT e.pg_name, e.pg_desc, e.rank, e.host,
               greatest(e.last_enqueued, s.last_enqueued_collective) AS last_enqueued,
               CASE WHEN s.last_started_collective >= 0 THEN s.last_started_collective ELSE e.last_started END,
               coalesce(s.last_completed_collective, e.last_completed) AS last_completed
        FROM e LEFT JOIN pg_status s
          ON s.job = $job AND s.attempt = $attempt AND s.rank = e.rank AND s.pg_id = e.pg_id::VARCHAR
        ORDER BY e.pg_desc, e.pg_name, e.rank
        """,
        {"job": job, "attempt": attempt, "pgs": None if pgs is None else list(pgs)},
    ).fetchall()
    groups: dict[str, tuple[str | None, list[RankProgress]]] = {}
    for pg, desc, rank, host, enq, started, completed in rows:
        groups.setdefault(pg, (desc, []))[1].append(RankProgress(rank, host, enq, started, completed))
    return tuple(GroupProgress(pg, desc, tuple(ranks)) for pg, (desc, ranks) in groups.items())
