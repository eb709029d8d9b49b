"""Collectives whose members disagree on op type, sizes or dtypes.

A collective instance is one (process group, sequence id). Members normally
agree; the one that differs is the culprit. With two members (or one, when
its peer left no dump) a vote inside the group cannot decide, so sibling
groups of the same description at the same sequence id, and each member's own
previous call at the same site, vote too: the value that differs from all of
them marks the rank that changed.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

import duckdb

from frlake.diagnose.evidence import Evidence

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


def find(con: duckdb.DuckDBPyConnection, ev: Evidence) -> list[Mismatch]:
    candidates = {
        (pg, seq)
        for pg, seq in con.execute("SELECT pg_name, seq FROM _inst WHERE differ").fetchall()
    }
    # A member's last collective where a peer never arrived (or left no dump): only siblings can judge it.
    for pg, members in ev.members.items():
        lasts = [ev.last_seq.get((m, pg), -1) if m in ev.hosts else -1 for m in members]
        lowest = min(lasts, default=-1)
        candidates.update((pg, seq) for seq in set(lasts) if seq > lowest)
    if not candidates:
        return []
    con.execute("CREATE OR REPLACE TEMP TABLE _cand (pg_name VARCHAR, seq BIGINT)")
    con.executemany("INSERT INTO _cand VALUES (?, ?)", sorted(candidates))
    rows = con.execute(
        """
        WITH here AS (
          SELECT e.* FROM _e e JOIN _cand c USING (pg_name, seq) WHERE NOT e.is_p2p
        ), sib AS (
          SELECT c.pg_name AS for_pg, c.seq AS for_seq, e.type_sig, e.size_sig, e.dtype_sig
          FROM _cand c JOIN (SELECT DISTINCT pg_name, pg_desc FROM _e) d ON d.pg_name = c.pg_name
          JOIN _e e ON e.pg_desc = d.pg_desc AND e.pg_name <> c.pg_name AND e.seq = c.seq AND NOT e.is_p2p
        ), own AS (
          SELECT h.pg_name AS for_pg, h.seq AS for_seq, h.rank, p.type_sig, p.size_sig, p.dtype_sig
          FROM here h JOIN _e p ON p.rank = h.rank AND p.pg_name = h.pg_name AND p.seq < h.seq AND NOT p.is_p2p
            AND p.op = h.op AND p.stack_id IS NOT DISTINCT FROM h.stack_id
          QUALIFY row_number() OVER (PARTITION BY h.pg_name, h.seq, h.rank ORDER BY p.seq DESC) = 1
        )
        SELECT 'here', pg_name, seq, rank, type_sig, size_sig, dtype_sig FROM here
        UNION ALL SELECT 'sib', for_pg, for_seq, NULL, type_sig, size_sig, dtype_sig FROM sib
        UNION ALL SELECT 'own', for_pg, for_seq, rank, type_sig, size_sig, dtype_sig FROM own
        """
    ).fetchall()
    by_instance: dict[tuple[str, int], dict[str, list]] = {}
    for kind, pg, seq, rank, *sigs in rows:
        by_instance.setdefault((pg, seq), {"here": [], "sib": [], "own": []})[kind].append((rank, sigs))
    found: dict[tuple[int, str, int], str] = {}
    for (pg, seq), votes in by_instance.items():
        if not votes["here"]:
            continue
        for i, (_, reason) in enumerate(FIELDS):
            members = {rank: sigs[i] for rank, sigs in votes["here"]}
            siblings = [sigs[i] for _, sigs in votes["sib"]]
            own = [sigs[i] for _, sigs in votes["own"]]
            if len(set(members.values())) == 1:
                value = next(iter(members.values()))
                # alone (or all agreeing) against unanimous siblings and their own history
                if not siblings or len(set(siblings)) != 1 or siblings[0] == value:
                    continue
                if own and any(o == value for o in own):
                    continue
            tally = Counter(members.values()) + Counter(siblings) + Counter(own)
            ranked = tally.most_common()
            if len(ranked) > 1 and ranked[0][1] == ranked[1][1]:
                continue  # no majority: cannot tell who changed
            normal = ranked[0][0]
            for rank, value in members.items():
                if value != normal and (rank, pg, seq) not in found:
                    found[(rank, pg, seq)] = reason
    if not found:
        return []
    return _details(con, ev, found)


def _details(con: duckdb.DuckDBPyConnection, ev: Evidence, found: dict[tuple[int, str, int], str]) -> list[Mismatch]:
    out = []
    for (rank, pg, seq), reason in found.items():
        row = con.execute(
            """
            SELECT e.pg_desc, e.op, e.input_sizes::VARCHAR, e.output_sizes::VARCHAR, e.input_dtypes::VARCHAR,
                   e.time_created_ns, e.stack_id
            FROM entries e JOIN _d d USING (dump_id)
            WHERE e.job = $job AND e.attempt = $attempt AND e.rank = $rank AND e.pg_name = $pg
              AND e.collective_seq_id = $seq AND NOT e.is_p2p
            LIMIT 1
            """,
            {"job": ev.job, "attempt": ev.attempt, "rank": rank, "pg": pg, "seq": seq},
        ).fetchone()
        peers = con.execute(
            """
            SELECT mode(op), mode(input_sizes::VARCHAR), mode(output_sizes::VARCHAR), mode(input_dtypes::VARCHAR)
            FROM entries e JOIN _d d USING (dump_id)
            WHERE e.job = $job AND e.attempt = $attempt AND e.rank <> $rank AND e.pg_desc = $desc
              AND e.collective_seq_id = $seq AND NOT e.is_p2p
            """,
            {"job": ev.job, "attempt": ev.attempt, "rank": rank, "desc": row[0], "seq": seq},
        ).fetchone()
        desc, op, in_sizes, out_sizes, in_dtypes, t, stack_id = row
        if reason == "type_mismatch":
            expected, got = peers[0], op
        elif reason == "size_mismatch":
            expected, got = f"{peers[1]} -> {peers[2]}", f"{in_sizes} -> {out_sizes}"
        else:
            expected, got = peers[3], in_dtypes
        out.append(Mismatch(rank, reason, pg, desc, seq, op, str(expected), str(got), t, stack_id))
    out.sort(key=lambda m: (m.t if m.t is not None else 0, m.rank))
    return out

