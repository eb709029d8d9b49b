"""One attempt's entries as torch users read them (``fr_trace -j``,
``--selected-ranks``, ``--pg-filters``): each collective with the chosen
ranks side by side, and at the hang, which ranks stand at another frame than
the rest."""

from __future__ import annotations

from dataclasses import dataclass

import duckdb

from frlake.entities import Diagnosis
from frlake.query.attempt import near_the_culprits
from frlake.query.vocabulary import END_MARKER, NEWEST_DUMP, Relations, listed_members, member_lists
from frlake.values import Record

MAX_ROWS = 2_000  # collectives shown at most, the last ones (a window of sequence ids narrows it)
MAX_RANKS = 32  # ranks shown when none are chosen: all of a small attempt, else the culprits and their neighbours


@dataclass(frozen=True)
class EntryFilter:
    """Which part of an attempt to show: ranks, process groups (names or
    descriptions, as torch's --pg-filters) and a window of sequence ids."""

    ranks: tuple[int, ...] | None = None
    pgs: tuple[str, ...] | None = None
    seq_from: int | None = None
    seq_to: int | None = None

    @staticmethod
    def parse_seq(text: str | None) -> tuple[int | None, int | None]:
        """``A:B`` (inclusive), ``A:``, ``:B`` or ``A``."""
        if not text:
            return None, None
        lo, sep, hi = text.partition(":")
        try:
            start = int(lo) if lo.strip() else None
            end = (int(hi) if hi.strip() else None) if sep else start
        except ValueError:
            raise ValueError(f"a sequence window is A:B, A: or :B with whole numbers, not {text!r}") from None
        if start is not None and end is not None and start > end:
            raise ValueError(f"the sequence window {text!r} is reversed: A:B runs from A up to B ({end}:{start})")
        return start, end


@dataclass(frozen=True)
class Cell(Record):
    """One rank's entry for one collective."""

    op: str | None
    state: str | None
    sizes: str | None
    dtypes: str | None
    late_ms: float | None  # after the first member's


@dataclass(frozen=True)
class Collective(Record):
    """One collective with a cell per rank shown that has an entry for it."""

    pg: str
    pg_desc: str | None
    seq: int
    cells: dict[int, Cell]  # by rank
    op: str  # the ops the ranks recorded, "/"-joined where they differ
    agree: bool  # every cell has the same op, sizes and dtypes
    missing: tuple[int, ...]  # members shown without an entry
    members: tuple[int, ...]  # members shown
    members_total: int
    part: int = 1  # which op of a coalesced block (its entries that share the group and sequence id), from 1
    parts: int = 1  # the most ops a member's block holds: 1 for a collective of one op

    @property
    def label(self) -> str:
        """The op, with its place in a coalesced block ("broadcast, op 2 of 2")."""
        return self.op if self.parts == 1 else f"{self.op}, op {self.part} of {self.parts}"


@dataclass(frozen=True)
class RankShown(Record):
    rank: int
    host: str | None


@dataclass(frozen=True)
class SideBySide(Record):
    """An attempt's collectives with the chosen ranks side by side (:func:`side_by_side`)."""

    job: str
    attempt: int
    ranks: tuple[RankShown, ...]
    pgs: tuple[str, ...] | None
    ranks_total: int
    ranks_truncated: bool
    collectives: tuple[Collective, ...]
    truncated: bool  # more collectives matched than shown
    states_recorded: tuple[str, ...]  # the states the attempt's entries hold: gloo's, ("scheduled",) only


def state_legend(view: SideBySide) -> str:
    """What a cell's letter says, for what the attempt's producer records: gloo's recorder leaves every entry
    "scheduled", so there a Q is all the dump says, not a collective that never ran."""
    if not view.states_recorded or {"started", "completed"} & set(view.states_recorded):
        return "Q scheduled, S started, C completed"
    return ("Q: enqueued; these dumps do not record whether it started or completed (gloo's Flight Recorder "
            "leaves every entry scheduled), so a Q is not a collective that never ran")


def side_by_side(con: duckdb.DuckDBPyConnection, job: str, attempt: int, flt: EntryFilter = EntryFilter(),
                 limit: int = MAX_ROWS, *, diagnosis: Diagnosis | None = None,
                 max_ranks: int = MAX_RANKS) -> SideBySide:
    """The attempt's collectives (in the filter) with one cell per rank shown:
    its op, state, sizes and arrival (ms after the first member), or nothing
    where the rank has no entry for it. A coalesced block (entries of one rank that share the group and
    sequence id) is a row per op, each op compared with the same op of the other members' blocks. Without ``flt.ranks``, an attempt of
    more than ``max_ranks`` ranks shows the culprits of ``diagnosis`` and
    the members of the hung group nearest them (culprits first), in the hung
    group's collectives unless ``flt.pgs`` names others; the last ``limit``
    collectives (those nearest the hang) when there are more."""
    params = {"job": job, "attempt": attempt}
    hosts: dict[int, str | None] = dict(con.execute(
        "SELECT rank, any_value(host) FROM dumps WHERE job = $job AND attempt = $attempt GROUP BY rank",
        params).fetchall())
    members = _members(con, params)
    pgs = None
    if flt.pgs:
        wanted = set(flt.pgs)
        pgs = {name for (name, desc) in con.execute(
            "SELECT DISTINCT pg_name, pg_desc FROM entries WHERE job = $job AND attempt = $attempt", params).fetchall()
            if name in wanted or desc in wanted}
    # the ranks that could be shown: those that left a dump (of the groups asked for)
    candidates = sorted(set(hosts) if pgs is None else {r for pg in pgs for r in members.get(pg, ())} & set(hosts))
    if flt.ranks:
        shown = sorted(set(flt.ranks))
    else:
        if len(candidates) <= max_ranks:
            shown = candidates
        else:
            root = next((c for c in diagnosis.culprits if c.role == "root"), None) if diagnosis else None
            hung = members.get(root.pg) if root is not None and pgs is None else None
            near = near_the_culprits(candidates, diagnosis, max_ranks, sorted(hung) if hung else None)
            first = [c.rank for c in diagnosis.culprits if c.role == "root" and c.rank in near] if diagnosis else []
            shown = first + [r for r in near if r not in first]  # the culprits' columns first
            if hung:  # and the hung group's collectives, where every rank shown is a member
                pgs = {root.pg}
    rows = con.execute(
        f"""
        WITH d AS (
          SELECT d.rank, d.dump_id, d.host
          FROM dumps d LEFT JOIN (SELECT * FROM snapshots WHERE job = $job AND attempt = $attempt) s USING (dump_id)
          WHERE d.job = $job AND d.attempt = $attempt AND list_contains($ranks::INTEGER[], d.rank)
          QUALIFY row_number() OVER (PARTITION BY d.rank ORDER BY {NEWEST_DUMP}) = 1
        ), e AS (
          SELECT e.pg_name, e.pg_desc, e.collective_seq_id AS seq, e.rank, d.host, e.op, e.state,
                 e.input_sizes, e.input_dtypes, e.time_created_ns AS t, e.entry_index,
                 row_number() OVER (PARTITION BY e.pg_name, e.collective_seq_id, e.rank ORDER BY e.entry_index) AS part
          FROM entries e JOIN d USING (dump_id)
          WHERE e.job = $job AND e.attempt = $attempt AND NOT e.is_p2p AND e.collective_seq_id IS NOT NULL
            AND NOT {END_MARKER.replace("op ", "e.op ")}
            AND list_contains($ranks::INTEGER[], e.rank)
            AND ($pgs::VARCHAR[] IS NULL OR list_contains($pgs::VARCHAR[], e.pg_name))
            AND ($lo::BIGINT IS NULL OR e.collective_seq_id >= $lo) AND ($hi::BIGINT IS NULL OR e.collective_seq_id <= $hi)
        ), keys AS (
          SELECT pg_name, seq, min(t) AS t0 FROM e GROUP BY ALL ORDER BY min(t) DESC, pg_name, seq LIMIT $limit
        )
        SELECT e.pg_name, e.pg_desc, e.seq, e.rank, e.host, e.op, e.state, e.input_sizes::VARCHAR,
               e.input_dtypes::VARCHAR, round((e.t - keys.t0) / 1e6, 3) AS late_ms, e.part
        FROM e JOIN keys USING (pg_name, seq)
        ORDER BY keys.t0, e.pg_name, e.seq, e.part, e.rank
        """,
        params | {"ranks": shown, "pgs": sorted(pgs) if pgs is not None else None, "lo": flt.seq_from,
                  "hi": flt.seq_to, "limit": limit},
    ).fetchall()
    found: dict[tuple[str, int, int], tuple[str | None, dict[int, Cell]]] = {}
    parts: dict[tuple[str, int], int] = {}
    for pg, desc, seq, rank, _host, op, state, sizes, dtypes, late, part in rows:
        found.setdefault((pg, seq, part), (desc, {}))[1][rank] = Cell(op, state, sizes, dtypes, late)
        parts[(pg, seq)] = max(parts.get((pg, seq), 1), part)
    in_view = set(shown)
    out = []
    for (pg, seq, part), (desc, cells) in found.items():
        group = members.get(pg, set()) | set(cells)
        out.append(Collective(
            pg, desc, seq, cells, "/".join(sorted({c.op for c in cells.values() if c.op is not None})),
            len({(c.op, c.sizes, c.dtypes) for c in cells.values()}) == 1,
            tuple(r for r in shown if r not in cells and r in group), tuple(sorted(group & in_view)), len(group),
            part, parts[(pg, seq)]))
    seen = {(pg, seq) for pg, seq, _ in found}
    (states,) = con.execute("SELECT list(DISTINCT state ORDER BY state) FILTER (state IS NOT NULL) FROM entries "
                            "WHERE job = $job AND attempt = $attempt", params).fetchone()
    return SideBySide(job, attempt, tuple(RankShown(r, hosts.get(r)) for r in shown),
                      tuple(sorted(pgs)) if pgs is not None else None, len(candidates),
                      not flt.ranks and len(shown) < len(candidates), tuple(out), len(seen) >= limit,
                      tuple(states or ()))


def _members(con: duckdb.DuckDBPyConnection, params: dict) -> dict[str, set[int]]:
    """Each group's members: the rank lists its dumps carry (each distinct list read once: a 16,384-rank
    job's dumps list the world group 16,384 times), and every rank that recorded a collective in it."""
    every_dump = Relations(one_dump_per_rank=True)  # every dump's lists, as before (not only the newest's)
    members = listed_members(con, params, every_dump, member_lists(con, params, every_dump))
    for pg, rank in con.execute(
        "SELECT DISTINCT pg_name, rank FROM entries WHERE job = $job AND attempt = $attempt AND NOT is_p2p", params,
    ).fetchall():
        members.setdefault(pg, set()).add(rank)
    return members
