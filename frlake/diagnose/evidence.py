"""Load what one attempt recorded, summarised by DuckDB.

The heavy work (millions of entries for a 1,000-rank job) happens in SQL;
Python only sees per-rank, per-group summaries and the few collectives that
look wrong.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import duckdb

# Collectives whose members hold tensors of different sizes by design (torch's flight_recorder types.py and
# torchcomms' op names): all-to-alls exchange unequal splits, the "_v" ops gather or scatter unequal parts.
# Only their op type and dtypes are compared.
UNEVEN = ("all_to_all", "alltoall", "alltoall_base", "all_to_allv", "alltoallv", "all_to_all_single",
          "all_to_all_v_single", "all_gather_v", "allgather_v", "reduce_scatter_v", "reducescatter_v")
ALL_TO_ALL = UNEVEN  # the name earlier code imported
# Ops whose whole tensor exists on the root only: members compare scatter's outputs and gather's inputs.
_GATHER = ("gather", "gather_single")
# The entry that closes a coalesced block ("nccl:coalesced", "nccl:ALLGATHER_coalesced"): no tensors of its
# own. The fast-path single entries ("nccl:allreduce_coalesced", with sizes) are ordinary collectives.
END_MARKER = "(op = 'coalesced' OR (op LIKE '%coalesced' AND len(coalesce(input_sizes, [])) = 0 " \
             "AND len(coalesce(output_sizes, [])) = 0))"
# Which tensors every member of a collective must agree on.
_SIZE_SIG = f"""CASE WHEN op IN {UNEVEN} THEN hash(op)
                     WHEN op = 'scatter' THEN hash(output_sizes) WHEN op IN {_GATHER} THEN hash(input_sizes)
                     ELSE hash(input_sizes, output_sizes) END"""
# Entry e belongs to coalesced block b (a row of _blk): same rank, group and sequence ids.
_IN_BLOCK = "b.rank = e.rank AND b.pg_name = e.pg_name AND b.seq = e.seq AND b.p2p_seq = coalesce(e.p2p_seq, -1)"
# When several dumps claim one rank of an attempt (snapshots, a file rewritten in place, a copy), the
# diagnosis reads the newest: by its newest entry, then the file's mtime, then its bytes. Never by the
# order of ingest, so the same dumps give the same diagnosis whatever order they arrived in.
NEWEST_DUMP = "last_time_created_ns DESC NULLS LAST, source_mtime_ns DESC NULLS LAST, sha256"
_DTYPE_SIG = f"""CASE WHEN op = 'scatter' THEN hash(output_dtypes) WHEN op IN {_GATHER} THEN hash(input_dtypes)
                     ELSE hash(input_dtypes, output_dtypes) END"""
# torchcomms keeps one collective_seq_id counter for all its communicators, incremented by every op (send and
# recv included), and writes p2p_seq_id 0 and the backend as the group's desc: a rank whose dump has this shape
# gets its sequence ids numbered per group, in the order it enqueued its ops.
_SHARED_COUNTER = """
    SELECT rank FROM {entries} GROUP BY rank
    HAVING bool_and(desc_is_backend) AND max(coalesce(p2p_seq, 0)) = 0
       AND (count(DISTINCT pg_name) > 1 OR bool_or(is_p2p)) AND count(seq) = count(DISTINCT seq)
    ORDER BY rank
"""


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
    they hold; the analyses read them through these names, never by guessing.

    Their ``pg_name`` column is the group's identity: its name, or, when
    disjoint groups share one name (split_group), the name and a digest of its
    members (``5@1f0c...``; :attr:`Evidence.names` maps it back)."""

    dumps: str = "_d"  # the dump read for each rank: rank, host, dump_id, first_record_id
    entries: str = "_e"  # its entries, with type, size and dtype signatures
    blocks: str = "_blk"  # coalesced blocks: rank, pg_name, seq, p2p_seq, state of the end marker
    calls: str = "_c"  # one row per rank and collective call (a coalesced block is one call)
    instances: str = "_inst"  # one row per collective instance (pg_name, seq) with two or more members
    group_keys: str = "_gk"  # (rank, pg name) -> group identity, where disjoint groups share a name


@dataclass
class Evidence:
    job: str
    attempt: int
    hosts: dict[int, str]  # dumped rank -> host
    wrapped: set[int]  # ranks whose ring buffer lost old entries
    members: dict[str, list[int]]  # group -> member ranks
    desc: dict[str, str | None]
    last_seq: dict[tuple[int, str], int]  # (rank, group) -> last collective seq enqueued
    first_seq: dict[tuple[int, str], int]
    last: dict[int, LastEntry]  # where each rank is stuck: its first unfinished entry, else its last
    world: list[int] = field(default_factory=list)
    rel: Relations = field(default_factory=Relations)
    several_dumps: dict[int, int] = field(default_factory=dict)  # rank -> dumps that claim it (the newest is used)
    names: dict[str, str] = field(default_factory=dict)  # group -> its name, for groups that share a name
    renumbered: list[int] = field(default_factory=list)  # ranks whose seq ids were numbered per group (torchcomms)

    def name(self, pg: str | None) -> str | None:
        """The name a group was given (what the user sees in the dumps)."""
        return self.names.get(pg, pg) if pg is not None else None


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
    split = _group_keys(con, params, rel)
    pg = "coalesce(k.pg, en.pg_name)" if split else "en.pg_name"
    keys = f"LEFT JOIN {rel.group_keys} k ON k.rank = en.rank AND k.pg_name = en.pg_name" if split else ""
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.entries} AS
        SELECT en.rank, en.dump_id, {pg} AS pg_name, en.pg_desc, en.collective_seq_id AS seq,
               en.p2p_seq_id AS p2p_seq, en.is_p2p, en.op, en.state, en.entry_index, en.time_created_ns AS t,
               en.stack_id, en.p2p_src, en.p2p_dst, {END_MARKER} AS marker, hash(op) AS type_sig,
               {_SIZE_SIG} AS size_sig, {_DTYPE_SIG} AS dtype_sig,
               en.pg_desc IS NOT DISTINCT FROM en.backend AS desc_is_backend
        FROM entries en {keys}
        WHERE en.job = $job AND en.attempt = $attempt AND en.dump_id IN (SELECT dump_id FROM {rel.dumps})
        """,
        params,
    )
    renumbered = []
    if con.execute(f"SELECT count(*) FROM (SELECT 1 FROM {rel.entries} WHERE desc_is_backend LIMIT 1)").fetchone()[0]:
        renumbered = [r for (r,) in con.execute(_SHARED_COUNTER.format(entries=rel.entries)).fetchall()]
    if renumbered:
        # per rank and group, in the order of enqueueing: collectives 1, 2, ...; a p2p op takes the number of
        # the group's last collective before it (as ProcessGroupNCCL does) and a p2p number of its own
        order = "OVER (PARTITION BY rank, pg_name ORDER BY entry_index ROWS UNBOUNDED PRECEDING)"
        shared = "rank IN (SELECT unnest($renumbered))"
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE {rel.entries} AS
            SELECT * REPLACE (
              CASE WHEN {shared} THEN count(*) FILTER (WHERE NOT is_p2p) {order} ELSE seq END AS seq,
              CASE WHEN {shared} THEN count(*) FILTER (WHERE is_p2p) {order} ELSE p2p_seq END AS p2p_seq)
            FROM {rel.entries}
            """,
            {"renumbered": renumbered},
        )
    # One row per rank and collective call (group, seq): a coalesced block (the collectives that share its
    # end marker's group and sequence ids) is one call of several ops, compared with the other members'
    # blocks as a whole. Every other collective entry is a call of its own.
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.blocks} AS
        SELECT rank, pg_name, seq, coalesce(p2p_seq, -1) AS p2p_seq, min(state) AS state
        FROM {rel.entries} WHERE marker GROUP BY ALL
        """
    )
    calls = f"""
        SELECT rank, dump_id, pg_name, pg_desc, seq, entry_index, t, op, stack_id, type_sig, size_sig, dtype_sig,
               state
        FROM {rel.entries} e WHERE NOT is_p2p AND NOT marker
    """
    if con.execute(f"SELECT count(*) FROM {rel.blocks}").fetchone()[0]:
        con.execute(
            f"""
            CREATE OR REPLACE TEMP TABLE _blk_calls AS
            SELECT e.rank, min(e.dump_id) AS dump_id, e.pg_name, min(pg_desc) AS pg_desc, e.seq,
                   min(entry_index) AS entry_index, min(t) AS t, arg_min(op, entry_index) AS op,
                   arg_min(stack_id, entry_index) AS stack_id,
                   hash(sum(type_sig::HUGEINT)) AS type_sig, hash(sum(size_sig::HUGEINT)) AS size_sig,
                   hash(sum(dtype_sig::HUGEINT)) AS dtype_sig, min(b.state) AS state
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
    group = "coalesce(k.pg, c.pg_name)" if split else "c.pg_name"
    keys = f"LEFT JOIN {rel.group_keys} k ON k.rank = c.rank AND k.pg_name = c.pg_name" if split else ""
    for pg, pg_desc, ranks in con.execute(
        f"""
        SELECT {group}, min(c.pg_desc), list(DISTINCT c.r ORDER BY c.r) FROM (
          SELECT rank, pg_name, pg_desc, unnest(ranks) AS r FROM groups
          WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}) AND ranks IS NOT NULL
        ) c {keys} GROUP BY ALL
        """,
        params,
    ).fetchall():
        members.setdefault(pg, set()).update(ranks)
        desc[pg] = pg_desc
    last_seq, first_seq = {}, {}
    for rank, pg, pg_desc, lo, hi in con.execute(
        f"SELECT rank, pg_name, min(pg_desc), min(seq), max(seq) FROM {rel.calls} GROUP BY ALL"
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
        elif is_p2p and len(members.get(pg, ())) == 2 and rank in members[pg]:
            peer = min(members[pg] - {rank})  # no peer in the name (torchcomms): a pair's other member
        last[rank] = LastEntry(pg, pg_desc, seq, op, bool(is_p2p), peer, state, t, stack_id)
    several = dict(con.execute(
        "SELECT rank, count(*) FROM dumps WHERE job = $job AND attempt = $attempt GROUP BY rank HAVING count(*) > 1",
        params).fetchall())
    world = set(hosts)
    for ranks in members.values():
        world.update(ranks)
    return Evidence(job, attempt, hosts, wrapped, {k: sorted(v) for k, v in members.items()}, desc,
                    last_seq, first_seq, last, sorted(world), rel, several, split, renumbered)


def _group_keys(con: duckdb.DuckDBPyConnection, params: dict, rel: Relations) -> dict[str, str]:
    """Identify groups that share a name by their members (torch's split_group; its analyzer keys a group
    by name plus a hash of its ranks). Each rank's entries of such a name belong to the member set its own
    pg_config gives that name; a rank without one (an empty pg_config) to the one set that holds it; else
    to the name alone, as before. Builds ``rel.group_keys``; returns {group: name} for the split names."""
    if not con.execute(
        f"""
        SELECT count(*) FROM (SELECT pg_name FROM groups
          WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}) AND len(ranks) > 0
          GROUP BY pg_name HAVING min(ranks) <> max(ranks) LIMIT 1)
        """,
        params,
    ).fetchone()[0]:
        return {}  # every name has one member list: names identify the groups
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE _gcfg AS
        SELECT DISTINCT rank, pg_name, list_sort(list_distinct(ranks)) AS ranks FROM groups
        WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}) AND len(ranks) > 0
        """,
        params,
    )
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.group_keys} AS
        WITH split AS (
          SELECT pg_name FROM _gcfg GROUP BY pg_name HAVING count(DISTINCT ranks) > 1
        ), sets AS (
          SELECT DISTINCT pg_name, ranks, pg_name || '@' || left(md5(ranks::VARCHAR), 12) AS pg
          FROM _gcfg WHERE pg_name IN (SELECT pg_name FROM split)
        ), own AS (
          SELECT c.rank, c.pg_name, s.pg FROM _gcfg c JOIN sets s USING (pg_name, ranks)
        ), member AS (
          SELECT unnest(ranks) AS rank, pg_name, pg FROM sets
        )
        SELECT rank, pg_name, pg FROM own
        UNION ALL
        SELECT rank, pg_name, min(pg) FROM member m
        WHERE NOT EXISTS (SELECT 1 FROM own o WHERE o.rank = m.rank AND o.pg_name = m.pg_name)
        GROUP BY rank, pg_name HAVING count(*) = 1
        """
    )
    return dict(con.execute(f"SELECT DISTINCT pg, pg_name FROM {rel.group_keys} ORDER BY pg").fetchall())


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
