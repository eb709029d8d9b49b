"""Load what one attempt recorded, summarised by DuckDB.

The heavy work (millions of entries for a 1,000-rank job) happens in SQL;
Python only sees per-rank, per-group summaries and the few collectives that
look wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

ALL_TO_ALL = ("all_to_all", "alltoall", "alltoall_base", "all_to_allv", "alltoallv")
# The entry that closes a coalesced block ("nccl:coalesced", "nccl:ALLGATHER_coalesced"): no tensors of its
# own. The fast-path single entries ("nccl:allreduce_coalesced", with sizes) are ordinary collectives.
END_MARKER = "(op = 'coalesced' OR (op LIKE '%coalesced' AND len(coalesce(input_sizes, [])) = 0 " \
             "AND len(coalesce(output_sizes, [])) = 0))"
# Which tensors every member of a collective must agree on: scatter's inputs and gather's outputs exist on
# the root only, and all_to_all members exchange unequal splits by design.
_SIZE_SIG = f"""CASE WHEN op IN {ALL_TO_ALL} THEN hash(op)
                     WHEN op = 'scatter' THEN hash(output_sizes) WHEN op = 'gather' THEN hash(input_sizes)
                     ELSE hash(input_sizes, output_sizes) END"""
# Entry e belongs to coalesced block b (a row of _blk): same rank, group and sequence ids.
_IN_BLOCK = "b.rank = e.rank AND b.pg_name = e.pg_name AND b.seq = e.seq AND b.p2p_seq = coalesce(e.p2p_seq, -1)"
# When several dumps claim one rank of an attempt (snapshots, a file rewritten in place, a copy), the
# diagnosis reads the newest: by its newest entry, then the file's mtime, then its bytes. Never by the
# order of ingest, so the same dumps give the same diagnosis whatever order they arrived in.
NEWEST_DUMP = "last_time_created_ns DESC NULLS LAST, source_mtime_ns DESC NULLS LAST, sha256"
_DTYPE_SIG = """CASE WHEN op = 'scatter' THEN hash(output_dtypes) WHEN op = 'gather' THEN hash(input_dtypes)
                     ELSE hash(input_dtypes, output_dtypes) END"""


@dataclass
class LastEntry:
    pg: str | None
    pg_desc: str | None
    seq: int | None
    op: str | None
    is_p2p: bool
    peer: int | None
    state: str | None
    t: int | None
    stack_id: int | None


@dataclass(frozen=True)
class Relations:
    """The temporary relations :func:`load` builds on the connection, by what
    they hold; the analyses read them through these names, never by guessing."""

    dumps: str = "_d"  # the dump read for each rank: rank, host, dump_id, first_record_id
    entries: str = "_e"  # its entries, with type, size and dtype signatures
    blocks: str = "_blk"  # coalesced blocks: rank, pg_name, seq, p2p_seq, state of the end marker
    calls: str = "_c"  # one row per rank and collective call (a coalesced block is one call)
    instances: str = "_inst"  # one row per collective instance (pg_name, seq) with two or more members


@dataclass
class Evidence:
    job: str
    attempt: int
    hosts: dict[int, str]  # dumped rank -> host
    wrapped: set[int]  # ranks whose ring buffer lost old entries
    members: dict[str, list[int]]  # pg_name -> member ranks
    desc: dict[str, str | None]
    last_seq: dict[tuple[int, str], int]  # (rank, pg) -> last collective seq enqueued
    first_seq: dict[tuple[int, str], int]
    last: dict[int, LastEntry]  # where each rank is stuck: its first unfinished entry, else its last
    world: list[int] = field(default_factory=list)
    rel: Relations = field(default_factory=Relations)
    several_dumps: dict[int, int] = field(default_factory=dict)  # rank -> dumps that claim it (the newest is used)


def load(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> Evidence:
    params = {"job": job, "attempt": attempt}
    rel = Relations()
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.dumps} AS
        SELECT rank, host, dump_id, first_record_id FROM dumps
        WHERE job = $job AND attempt = $attempt
        QUALIFY row_number() OVER (PARTITION BY rank ORDER BY {NEWEST_DUMP}) = 1
        """,
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.entries} AS
        SELECT rank, pg_name, pg_desc, collective_seq_id AS seq, p2p_seq_id AS p2p_seq, is_p2p, op, state,
               entry_index, time_created_ns AS t, stack_id, p2p_src, p2p_dst, {END_MARKER} AS marker,
               hash(op) AS type_sig, {_SIZE_SIG} AS size_sig, {_DTYPE_SIG} AS dtype_sig
        FROM entries
        WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps})
        """,
        params,
    )
    # One row per rank and collective call (group, seq): a coalesced block (the collectives that share its
    # end marker's group and sequence ids) is one call of several ops, compared with the other members'
    # blocks as a whole. Every other collective entry is a call of its own.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.blocks} AS
        SELECT DISTINCT rank, pg_name, seq, coalesce(p2p_seq, -1) AS p2p_seq, state FROM {rel.entries} WHERE marker
        """
    )
    calls = f"""
        SELECT rank, pg_name, pg_desc, seq, entry_index, t, op, stack_id, type_sig, size_sig, dtype_sig, state
        FROM {rel.entries} e WHERE NOT is_p2p AND NOT marker
    """
    if con.execute(f"SELECT count(*) FROM {rel.blocks}").fetchone()[0]:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _blk_calls AS
            SELECT e.rank, e.pg_name, any_value(pg_desc) AS pg_desc, e.seq, min(entry_index) AS entry_index,
                   min(t) AS t, arg_min(op, entry_index) AS op, arg_min(stack_id, entry_index) AS stack_id,
                   hash(sum(type_sig::HUGEINT)) AS type_sig, hash(sum(size_sig::HUGEINT)) AS size_sig,
                   hash(sum(dtype_sig::HUGEINT)) AS dtype_sig, any_value(b.state) AS state
            FROM {rel.entries} e JOIN (SELECT rank, pg_name, seq, p2p_seq, min(state) AS state FROM {rel.blocks} GROUP BY ALL) b
              ON {_IN_BLOCK}
            WHERE NOT is_p2p AND NOT marker
            GROUP BY e.rank, e.pg_name, e.seq
            """
        )
        calls += f"""
          AND NOT EXISTS (SELECT 1 FROM {rel.blocks} b WHERE {_IN_BLOCK})
        UNION ALL SELECT * FROM _blk_calls
        """
    con.execute(f"CREATE OR REPLACE TEMP VIEW {rel.calls} AS {calls}")
    # One row per collective instance (group, seq) with at least two members: shared by
    # the mismatch and lateness analyses.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.instances} AS
        SELECT pg_name, seq, count(*) AS n, min(t) AS t0, max(t) AS t1,
               min(type_sig) <> max(type_sig) OR min(size_sig) <> max(size_sig)
                 OR min(dtype_sig) <> max(dtype_sig) AS differ,
               count(*) FILTER (WHERE state = 'completed') AS n_completed,
               count(*) FILTER (WHERE state = 'scheduled') AS n_scheduled
        FROM {rel.calls} GROUP BY pg_name, seq HAVING n > 1
        """
    )
    hosts, wrapped = {}, set()
    for rank, host, first_record in con.execute(f"SELECT rank, host, first_record_id FROM {rel.dumps}").fetchall():
        hosts[rank] = host
        if first_record is not None and first_record > 0:
            wrapped.add(rank)
    members: dict[str, set[int]] = {}
    desc: dict[str, str | None] = {}
    # Each distinct rank list once: every rank of a 16,384-rank job lists the world's 16,384 ranks, and
    # unnesting them all (268M rows) cost more than the rest of the diagnosis.
    for pg, pg_desc, ranks in con.execute(
        f"""
        SELECT pg_name, any_value(pg_desc), any_value(ranks) FROM groups
        WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}) AND ranks IS NOT NULL
        GROUP BY pg_name, group_size, hash(ranks)
        """,
        params,
    ).fetchall():
        members.setdefault(pg, set()).update(ranks)
        desc[pg] = pg_desc
    last_seq, first_seq = {}, {}
    for rank, pg, pg_desc, lo, hi in con.execute(
        f"SELECT rank, pg_name, any_value(pg_desc), min(seq), max(seq) FROM {rel.calls} GROUP BY ALL"
    ).fetchall():
        members.setdefault(pg, set()).add(rank)  # membership inferred from what ranks recorded
        desc.setdefault(pg, pg_desc)
        first_seq[(rank, pg)], last_seq[(rank, pg)] = lo, hi
    last = {}
    for row in con.execute(
        f"""
        WITH s AS (  -- the ops of a coalesced block stay "scheduled"; its end marker has the state
          SELECT e.rank, e.entry_index, coalesce(b.state, e.state) AS state
          FROM {rel.entries} e LEFT JOIN {rel.blocks} b
            ON {_IN_BLOCK}
          WHERE NOT e.marker
        ), k AS (
          SELECT rank,
                 CASE WHEN bool_or(state = 'completed') AND count(*) FILTER (WHERE state <> 'completed') > 0
                      THEN min(entry_index) FILTER (WHERE state <> 'completed')
                      ELSE max(entry_index) END AS stuck_at
          FROM s GROUP BY rank
        )
        SELECT e.rank, e.pg_name, e.pg_desc, e.seq, e.op, e.is_p2p, e.p2p_src, e.p2p_dst,
               coalesce(b.state, e.state), e.t, e.stack_id
        FROM {rel.entries} e JOIN k ON e.rank = k.rank AND e.entry_index = k.stuck_at
        LEFT JOIN {rel.blocks} b
          ON {_IN_BLOCK}
        """
    ).fetchall():
        rank, pg, pg_desc, seq, op, is_p2p, src, dst, state, t, stack_id = row
        peer = None
        if is_p2p and src is not None and dst is not None:
            peer = _global_peer(members.get(pg), rank, src, dst)
        last[rank] = LastEntry(pg, pg_desc, seq, op, bool(is_p2p), peer, state, t, stack_id)
    several = dict(con.execute(
        "SELECT rank, count(*) FROM dumps WHERE job = $job AND attempt = $attempt GROUP BY rank HAVING count(*) > 1",
        params).fetchall())
    world = set(hosts)
    for ranks in members.values():
        world.update(ranks)
    return Evidence(job, attempt, hosts, wrapped, {k: sorted(v) for k, v in members.items()}, desc,
                    last_seq, first_seq, last, sorted(world), rel, several)


def _global_peer(members: set[int] | None, rank: int, src: int, dst: int) -> int | None:
    """p2p names carry group-local ranks ("send 0->1"); map the peer to a global rank."""
    ordered = sorted(members) if members else None
    local = {g: i for i, g in enumerate(ordered)} if ordered else None
    me = local.get(rank, rank) if local else rank
    other = dst if src == me else src
    if ordered and 0 <= other < len(ordered):
        return ordered[other]
    return other


def stacks(con: duckdb.DuckDBPyConnection, ids: list[int]) -> dict[int, list[dict]]:
    if not ids:
        return {}
    rows = con.execute("SELECT stack_id, frames FROM stacks WHERE stack_id IN (SELECT unnest($ids))", {"ids": ids}).fetchall()
    return {sid: frames for sid, frames in rows}
