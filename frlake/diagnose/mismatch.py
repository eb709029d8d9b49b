"""Collectives whose members disagree on op type, sizes or dtypes.

A collective instance is one (process group, sequence id). Members normally
agree; the one that differs is the culprit. With two members (or one, when
its peer left no dump) a vote inside the group cannot decide, so sibling
groups of the same description and size at the same sequence id, and each
member's own previous call at the same site, vote too: the value that
differs from all of them marks the rank that changed. When members disagree
and nothing settles who changed (two members, or a tie), every member is a
*suspect*: a mismatch all the same, with the evidence, never healthy.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import duckdb
import pyarrow as pa

from frlake.diagnose.evidence import P2P_NAMED, Evidence, temp_table

FIELDS = (("type_sig", "type_mismatch"), ("size_sig", "size_mismatch"), ("dtype_sig", "dtype_mismatch"))


@dataclass
class Mismatch:
    rank: int
    reason: str
    pg: str
    pg_desc: str | None
    seq: int
    op: str | None
    expected: str
    found: str
    t: int | None
    stack_id: int | None
    role: str = "root"  # root | suspect (members disagree and the data cannot tell which changed)


def find(con: duckdb.DuckDBPyConnection, ev: Evidence) -> list[Mismatch]:
    found = _collectives(con, ev) + _point_to_point(con, ev)
    found.sort(key=lambda m: (m.role != "root", m.t if m.t is not None else 0, m.rank, m.pg, m.seq, m.reason))
    return found


def states(con: duckdb.DuckDBPyConnection, ev: Evidence) -> list[Mismatch]:
    """Members that never started a collective that most members completed,
    although they went on to later collectives of the group: with NCCL no
    member completes before every member launched it, and a group's work runs
    in order, so those records contradict the others. (At a rank's newest
    collective "scheduled" only means the watchdog had not looked yet.)"""
    rows = ev.batch_rows.states if ev.batch_rows is not None else con.execute(
        STATES.format(k="", ck="", same="", calls=ev.rel.calls, instances=ev.rel.instances)).fetchall()
    return [Mismatch(rank, "state_mismatch", pg, desc, seq, op, "completed", "scheduled", t, stack_id)
            for rank, pg, desc, seq, op, t, stack_id in rows]


# states' rows, of one attempt or of each (``k`` "job, attempt, ", ``ck`` the same of c, ``same`` l's of c's attempt)
STATES = """
    SELECT {ck}c.rank, c.pg_name, c.pg_desc, c.seq, c.op, c.t, c.stack_id
    FROM {calls} c JOIN {instances} i USING ({k}pg_name, seq)
    WHERE c.state = 'scheduled' AND i.n_completed > i.n_scheduled
      AND c.seq < (SELECT max(l.seq) FROM {calls} l WHERE l.rank = c.rank AND l.pg_name = c.pg_name{same})
    ORDER BY {ck}c.t, c.rank, c.pg_name, c.seq
"""


_INSTANCE = {"pg_name": pa.string(), "seq": pa.int64()}  # a temporary table of collective instances


def _collectives(con: duckdb.DuckDBPyConnection, ev: Evidence) -> list[Mismatch]:
    candidates = set(ev.batch_rows.differ if ev.batch_rows is not None else con.execute(
        f"SELECT pg_name, seq FROM {ev.rel.instances} WHERE differ").fetchall())
    # A member's last collective where a peer never arrived (or left no dump): only siblings can judge it.
    for pg, members in ev.members.items():
        lasts = [ev.last_seq.get((m, pg), -1) if m in ev.hosts else -1 for m in members]
        lowest = min(lasts, default=-1)
        candidates.update((pg, seq) for seq in set(lasts) if seq > lowest)
    if not candidates:
        return []
    temp_table(con, "_cand", _INSTANCE, sorted(candidates))
    _group_sizes(con, ev)
    calls = ev.rel.calls
    here = f"here AS (SELECT e.* FROM {calls} e JOIN _cand c USING (pg_name, seq))"
    # The candidates' own calls and their siblings' (groups of the same description and size, at the same
    # sequence id), in one pass over the calls.
    rows = con.execute(
        f"""
        WITH k AS (
          SELECT pg_name, seq, pg_name AS for_pg, true AS here FROM _cand
          UNION ALL
          SELECT s.pg_name, c.seq, c.pg_name, false
          FROM _cand c JOIN _gsize g ON g.pg_name = c.pg_name
          JOIN _gsize s ON s.pg_desc = g.pg_desc AND s.n = g.n AND s.pg_name <> g.pg_name
        )
        SELECT CASE WHEN k.here THEN 'here' ELSE 'sib' END, k.for_pg, k.seq, CASE WHEN k.here THEN e.rank END,
               e.type_sig, e.size_sig, e.dtype_sig
        FROM k JOIN {calls} e ON e.pg_name = k.pg_name AND e.seq = k.seq
        WHERE e.seq IN (SELECT seq FROM _cand)  -- read first, so the join sees the candidates' calls only
        """
    ).fetchall()
    by_instance: dict[tuple[str, int], dict[str, list]] = {}
    for kind, pg, seq, rank, *sigs in rows:
        by_instance.setdefault((pg, seq), {"here": [], "sib": [], "own": []})[kind].append((rank, sigs))
    # The members' own history (each one's previous call of the same op from the same stack) only votes where
    # the members and siblings leave it open: read it for those instances alone (a join of every member's
    # history, costly at 16,384 ranks).
    open_ = sorted(key for key, votes in by_instance.items() if _asks_history(votes))
    if open_:
        temp_table(con, "_cand", _INSTANCE, open_)
        for pg, seq, rank, *sigs in con.execute(
            f"""
            WITH {here}
            SELECT h.pg_name, h.seq, h.rank, p.type_sig, p.size_sig, p.dtype_sig
            FROM here h JOIN {calls} p ON p.rank = h.rank AND p.pg_name = h.pg_name AND p.seq < h.seq
              AND p.op = h.op AND p.stack_id IS NOT DISTINCT FROM h.stack_id
            QUALIFY row_number() OVER (PARTITION BY h.pg_name, h.seq, h.rank ORDER BY p.seq DESC) = 1
            """
        ).fetchall():
            by_instance[(pg, seq)]["own"].append((rank, sigs))
    found: dict[tuple[int, str, int], tuple[str, str, int, int | None]] = {}  # -> reason, role, field, normal
    for (pg, seq), votes in sorted(by_instance.items()):
        for rank, verdict in _judge(votes):
            found.setdefault((rank, pg, seq), verdict)
    if not found:
        return []
    return _details(con, ev, found)


class _HistoryAsked(Exception):
    """:func:`_judge` needs the members' own history."""


def _asks_history(votes: dict[str, list]) -> bool:
    """Whether judging the instance consults the members' own history (on any field)."""
    try:
        _judge(votes, history_read=False)
    except _HistoryAsked:
        return True
    return False


def _judge(votes: dict[str, list], history_read: bool = True) -> list[tuple[int, tuple[str, str, int, int | None]]]:
    """The members flagged in one collective instance, field by field: (rank, (reason, role, field, normal)).
    The members' own history (``votes["own"]``) is consulted only where the members and their siblings
    leave the verdict open; before it is read (``history_read`` false) that raises :class:`_HistoryAsked`."""

    def history(i: int) -> list:
        if not history_read:
            raise _HistoryAsked
        return [sigs[i] for _, sigs in votes["own"]]

    flagged = []
    if not votes["here"]:
        return flagged
    for i, (_, reason) in enumerate(FIELDS):
        members = {rank: sigs[i] for rank, sigs in votes["here"]}
        siblings = [sigs[i] for _, sigs in votes["sib"]]
        if len(set(members.values())) == 1:
            value = next(iter(members.values()))
            # alone (or all agreeing) against unanimous siblings and their own history
            if not siblings or len(set(siblings)) != 1 or siblings[0] == value:
                continue
            if any(o == value for o in history(i)):
                continue
        tally = Counter(members.values())
        ranked = tally.most_common()
        if len(members) < 3 or (len(ranked) > 1 and ranked[0][1] == ranked[1][1]):
            # the members alone cannot tell: siblings and history vote too
            tally += Counter(siblings) + Counter(history(i))
            ranked = tally.most_common()
        if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
            if len(set(members.values())) > 1:  # they disagree, and nothing says who changed
                flagged += [(rank, (reason, "suspect", i, None)) for rank in members]
            continue
        normal = ranked[0][0]
        flagged += [(rank, (reason, "root", i, normal)) for rank, value in members.items() if value != normal]
    return flagged


def _group_sizes(con: duckdb.DuckDBPyConnection, ev: Evidence) -> None:
    temp_table(con, "_gsize", {"pg_name": pa.string(), "pg_desc": pa.string(), "n": pa.int32()},
               sorted((pg, ev.desc.get(pg), len(m)) for pg, m in ev.members.items()))


def _details(con: duckdb.DuckDBPyConnection, ev: Evidence,
             found: dict[tuple[int, str, int], tuple[str, str, int, int | None]]) -> list[Mismatch]:
    """What each flagged member called, and what the others called: read from the calls of the group's own
    members (and of its siblings, where only they hold the value that settled it), never from a mode()."""
    temp_table(con, "_flag", _INSTANCE, sorted({(pg, seq) for _, pg, seq in found}))
    rows = con.execute(
        f"""
        WITH who AS (
          SELECT f.pg_name AS for_pg, f.seq, c.rank, c.pg_name, c.pg_name = f.pg_name AS here, c.pg_desc, c.op,
                 c.t, c.stack_id, c.type_sig, c.size_sig, c.dtype_sig
          FROM _flag f JOIN _gsize g ON g.pg_name = f.pg_name
          JOIN _gsize s ON s.pg_name = g.pg_name OR (s.pg_desc = g.pg_desc AND s.n = g.n)
          JOIN {ev.rel.calls} c ON c.pg_name = s.pg_name AND c.seq = f.seq
        )
        SELECT w.for_pg, w.seq, w.rank, w.here, w.pg_desc, w.op, w.t, w.stack_id, w.type_sig, w.size_sig,
               w.dtype_sig, string_agg(en.op, ' + ' ORDER BY en.entry_index),
               string_agg('input ' || en.input_sizes::VARCHAR || ', output ' || en.output_sizes::VARCHAR, ' + '
                          ORDER BY en.entry_index),
               string_agg(en.input_dtypes::VARCHAR, ' + ' ORDER BY en.entry_index)
        FROM who w JOIN {ev.rel.entries} e ON e.rank = w.rank AND e.pg_name = w.pg_name AND e.seq = w.seq
          AND NOT e.is_p2p AND NOT e.marker
        JOIN {ev.rel.dumps} d ON d.rank = e.rank  -- the dump read for the rank (the entries keep no dump id)
        JOIN entries en ON en.job = $job AND en.attempt = $attempt AND en.dump_id = d.dump_id
          AND en.entry_index = e.entry_index
        GROUP BY w.for_pg, w.seq, w.rank, w.here, w.pg_desc, w.op, w.t, w.stack_id, w.type_sig, w.size_sig,
                 w.dtype_sig, w.pg_name
        ORDER BY w.for_pg, w.seq, NOT w.here, w.rank, w.pg_name
        """,
        {"job": ev.job, "attempt": ev.attempt},
    ).fetchall()
    calls: dict[tuple[str, int], list[_Call]] = {}
    for for_pg, seq, *rest in rows:
        calls.setdefault((for_pg, seq), []).append(_Call(*rest))
    out = []
    for (rank, pg, seq), (reason, role, field, normal) in sorted(found.items(), key=lambda kv: (kv[0][1], kv[0][2], kv[0][0])):
        group = calls.get((pg, seq), [])
        mine = next((c for c in group if c.rank == rank and c.here), None)
        if mine is None:
            continue
        if role == "root":  # what a member holding the normal value called, else a sibling that did
            expected = next((c.texts[field] for c in group if c.sigs[field] == normal), None)
        else:  # what the other members called
            others = sorted({c.texts[field] for c in group if c.here and c.rank != rank} - {mine.texts[field]})
            expected = " or ".join(others) if others else None
        out.append(Mismatch(rank, reason, pg, mine.pg_desc, seq, mine.op, str(expected), str(mine.texts[field]),
                            mine.t, mine.stack_id, role))
    return out


class _Call:
    """One member's call at a flagged instance (or a sibling group's), with its signatures and their text."""

    def __init__(self, rank, here, pg_desc, op, t, stack_id, type_sig, size_sig, dtype_sig, ops, sizes, dtypes):
        self.rank, self.here, self.pg_desc, self.op, self.t, self.stack_id = rank, here, pg_desc, op, t, stack_id
        self.sigs, self.texts = (type_sig, size_sig, dtype_sig), (ops, sizes, dtypes)


# The k-th send from a to b at one p2p sequence id of a group meets the k-th recv at b from a (group-local
# ranks, as the names "send 0->1" and "recv 1<-0" carry them); a batch shares one sequence id.
# A side "changed" when it made this call from the same site before, never with these tensors.
_CHANGED = """(EXISTS (SELECT 1 FROM p o WHERE o.rank = {x}.rank AND o.pg_name = {x}.pg_name AND {sends}
                      AND o.p2p_seq < {x}.p2p_seq AND o.stack_id IS NOT DISTINCT FROM {x}.stack_id)
               AND NOT EXISTS (SELECT 1 FROM p o WHERE o.rank = {x}.rank AND o.pg_name = {x}.pg_name AND {sends}
                      AND o.p2p_seq < {x}.p2p_seq AND o.stack_id IS NOT DISTINCT FROM {x}.stack_id
                      AND o.size_sig = {x}.size_sig AND o.dtype_sig = {x}.dtype_sig))"""
# Whether any send and recv could disagree: a pair shares its group, p2p sequence id, source and destination,
# so one of these keys holds two signatures. Mostly none does, and the pairing below is not run.
# (P2P_KEYS_DISAGREE: those keys, of one attempt or of each, ``k`` "job, attempt, ")
P2P_KEYS_DISAGREE = f"""
    SELECT {{k}}pg_name FROM {{entries}} WHERE {P2P_NAMED} GROUP BY {{k}}pg_name, p2p_seq, p2p_src, p2p_dst
    HAVING min(hash(size_sig, dtype_sig)) <> max(hash(size_sig, dtype_sig))
"""
_P2P_DISAGREE = f"SELECT count(*) FROM ({P2P_KEYS_DISAGREE.format(k='', entries='{entries}')} LIMIT 1)"
_P2P_PAIRS = f"""
    WITH p AS (
      SELECT *, op IN ('send', 'isend') AS sends,
             row_number() OVER (PARTITION BY rank, pg_name, p2p_seq, p2p_src, p2p_dst, op IN ('send', 'isend')
                                ORDER BY entry_index) AS k
      FROM {{entries}} WHERE {P2P_NAMED}
    )
    SELECT s.rank, r.rank, s.pg_name, s.pg_desc, s.p2p_seq, s.size_sig <> r.size_sig, s.dtype_sig <> r.dtype_sig,
           s.t, r.t, s.stack_id, r.stack_id, s.entry_index, r.entry_index,
           {_CHANGED.format(x='s', sends='o.sends')} AS s_changed,
           {_CHANGED.format(x='r', sends='NOT o.sends')} AS r_changed
    FROM p s JOIN p r ON s.sends AND NOT r.sends AND s.pg_name = r.pg_name AND s.p2p_seq = r.p2p_seq
      AND s.p2p_src = r.p2p_src AND s.p2p_dst = r.p2p_dst AND s.k = r.k AND s.rank <> r.rank
    WHERE s.size_sig <> r.size_sig OR s.dtype_sig <> r.dtype_sig
"""


def _point_to_point(con: duckdb.DuckDBPyConnection, ev: Evidence) -> list[Mismatch]:
    """A send and its recv that disagree on the tensor's shape or dtype. The side
    that changed is the one whose earlier calls from the same site looked like
    the other side; when that cannot tell, the receiver is named first."""
    out = []
    if ev.p2p_entries == 0:  # counted by evidence.load: no send or recv names its peer
        return out
    if ev.batch_rows is not None:
        if not ev.batch_rows.p2p_disagree:
            return out
    elif not con.execute(_P2P_DISAGREE.replace("{entries}", ev.rel.entries)).fetchone()[0]:
        return out
    for row in con.execute(_P2P_PAIRS.replace("{entries}", ev.rel.entries)).fetchall():
        sender, receiver, pg, desc, seq, sizes, dtypes, s_t, r_t, s_stack, r_stack, s_i, r_i, s_changed, r_changed = row
        reason = "size_mismatch" if sizes else "dtype_mismatch"
        recv_tensors, send_tensors = _p2p_tensors(con, ev, receiver, r_i), _p2p_tensors(con, ev, sender, s_i)
        sides = [(receiver, "recv", r_t, r_stack, recv_tensors, send_tensors),
                 (sender, "send", s_t, s_stack, send_tensors, recv_tensors)]
        if s_changed and not r_changed:
            sides.reverse()
        for rank, op, t, stack_id, mine, theirs in sides[:1] if bool(s_changed) != bool(r_changed) else sides:
            out.append(Mismatch(rank, reason, pg, desc, seq, op, theirs, mine, t, stack_id))
    return out


def _p2p_tensors(con: duckdb.DuckDBPyConnection, ev: Evidence, rank: int, entry_index: int) -> str:
    sizes, dtypes = con.execute(
        f"""
        SELECT e.input_sizes::VARCHAR, e.input_dtypes::VARCHAR FROM entries e JOIN {ev.rel.dumps} d USING (dump_id)
        WHERE e.job = $job AND e.attempt = $attempt AND e.rank = $rank AND e.entry_index = $i
        """,
        {"job": ev.job, "attempt": ev.attempt, "rank": rank, "i": entry_index},
    ).fetchone()
    return f"{sizes} {dtypes}"

