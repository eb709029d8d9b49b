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
# diagnosis reads the newest: by its snapshot time (a time in the file name, else its newest entry, else
# the file's mtime; the snapshots table), then its newest entry, the file's mtime, its bytes. Never by the
# order of ingest, so the same dumps give the same diagnosis whatever order they arrived in.
NEWEST_DUMP = ("s.snapshot_ns DESC NULLS LAST, d.last_time_created_ns DESC NULLS LAST, "
               "d.source_mtime_ns DESC NULLS LAST, d.sha256")
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
    timing: Timing = field(default_factory=lambda: Timing())
    pending_tail: dict[str, PendingTail] = field(default_factory=dict)  # pg -> its newest pending collective
    progress: list[dict] = field(default_factory=list)  # ranks with several snapshots: moving or stuck
    live_hosts: dict[int, str] = field(default_factory=dict)  # rank -> host, from the debug server's live stacks


@dataclass
class Timing:
    """What the dumps' times say (the snapshots table): ``overdue`` ranks held
    a collective pending longer than its timeout when their dump was written
    (the job hung); ``in_flight``: every pending collective was younger than
    its timeout (a periodic snapshot of a job at work), so waiting is not a hang."""

    overdue: list[int] = field(default_factory=list)
    in_flight: bool = False
    pending_ranks: int = 0
    written_from: list[str] = field(default_factory=list)  # file_name / mtime: how each dump's time is known

    def to_dict(self) -> dict:
        return {"overdue_ranks": self.overdue, "in_flight": self.in_flight, "ranks_with_pending": self.pending_ranks,
                "dump_time_from": self.written_from}


@dataclass
class PendingTail:
    pg: str
    pg_desc: str | None
    seq: int
    op: str | None
    waiting: list[int]  # members that have it pending


def load(con: duckdb.DuckDBPyConnection, job: str, attempt: int) -> Evidence:
    params = {"job": job, "attempt": attempt}
    rel = Relations()
    con.execute(
        f"""
        CREATE OR REPLACE TEMP TABLE {rel.dumps} AS
        SELECT d.rank, d.host, d.dump_id, d.first_record_id, d.n_entries, s.written_ns, s.written_from,
               s.n_pending, s.oldest_pending_ns, s.timeout_ms, s.overdue
        FROM dumps d LEFT JOIN (SELECT * FROM snapshots WHERE job = $job AND attempt = $attempt) s USING (dump_id)
        WHERE d.job = $job AND d.attempt = $attempt
        QUALIFY row_number() OVER (PARTITION BY d.rank ORDER BY {NEWEST_DUMP}) = 1
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
    for pg, pg_desc, ranks in con.execute(
        f"""
        SELECT pg_name, any_value(pg_desc), list(DISTINCT r) FROM (
          SELECT pg_name, pg_desc, unnest(ranks) AS r FROM groups
          WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}) AND ranks IS NOT NULL
        ) GROUP BY pg_name
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
    _from_pg_status(con, params, rel, members, last_seq)
    several = dict(con.execute(
        "SELECT rank, count(*) FROM dumps WHERE job = $job AND attempt = $attempt GROUP BY rank HAVING count(*) > 1",
        params).fetchall())
    live_hosts = _live_hosts(con, params)
    world = set(hosts) | set(live_hosts)
    for ranks in members.values():
        world.update(ranks)
    for pg, pg_desc in desc.items():  # the default group spans the world, whoever recorded in it
        if pg_desc == "default_pg":
            members[pg] = set(members.get(pg, ())) | world
    return Evidence(job, attempt, hosts, wrapped, {k: sorted(v) for k, v in members.items()}, desc,
                    last_seq, first_seq, last, sorted(world), rel, several, _timing(con, rel),
                    _pending_tail(con, params, rel), _progress(con, params), live_hosts)


def _from_pg_status(con, params, rel: Relations, members: dict[str, set[int]],
                    last_seq: dict[tuple[int, str], int]) -> None:
    """A dump without entries (onlyActive with nothing active, includeCollectives=False) still says, in its
    pg_status, the last collective it enqueued in each group (keyed by the rank-local pg id, which the
    other ranks' entries map to the group's name): it is a member that reached that sequence id."""
    rows = con.execute(
        f"""
        WITH names AS (SELECT DISTINCT pg_id, pg_name FROM entries
                       WHERE job = $job AND attempt = $attempt AND dump_id IN (SELECT dump_id FROM {rel.dumps}))
        SELECT p.rank, n.pg_name, p.last_enqueued_collective
        FROM pg_status p JOIN names n ON p.pg_id = CAST(n.pg_id AS VARCHAR)
        WHERE p.job = $job AND p.attempt = $attempt
          AND p.dump_id IN (SELECT dump_id FROM {rel.dumps} WHERE coalesce(n_entries, 0) = 0)
        """,
        params,
    ).fetchall()
    for rank, pg, enqueued in rows:
        members.setdefault(pg, set()).add(rank)
        if enqueued is not None and enqueued >= 0:
            last_seq[(rank, pg)] = max(enqueued, last_seq.get((rank, pg), enqueued))


def _timing(con, rel: Relations) -> Timing:
    rows = con.execute(
        f"SELECT rank, n_pending, oldest_pending_ns, timeout_ms, written_ns, overdue, written_from FROM {rel.dumps}"
    ).fetchall()
    pending = [r for r in rows if r[1]]
    overdue = sorted(r[0] for r in rows if r[5])
    # a snapshot at work: something is pending, and each rank's pending collectives are known to be younger
    # than their timeout at its dump's time (a dump time before its own entries is no evidence)
    in_flight = bool(pending) and not overdue and all(
        t is not None and w is not None and o is not None and w >= o for _, _, o, t, w, _, _ in pending)
    return Timing(overdue, in_flight, len(pending), sorted({r[6] for r in rows if r[6]}))


def _pending_tail(con, params, rel: Relations) -> dict[str, PendingTail]:
    """Each group's newest collective that some member holds pending (not completed by its state, nor by
    the pg_status counter of gloo, whose entries stay "scheduled"), and the members that hold it."""
    rows = con.execute(
        f"""
        WITH p AS (
          SELECT e.rank, e.pg_name, e.pg_desc, e.collective_seq_id AS seq, e.op
          FROM entries e
          LEFT JOIN (SELECT * FROM pg_status WHERE job = $job AND attempt = $attempt) s
            ON s.dump_id = e.dump_id AND s.pg_id = CAST(e.pg_id AS VARCHAR)
          WHERE e.job = $job AND e.attempt = $attempt AND e.dump_id IN (SELECT dump_id FROM {rel.dumps})
            AND NOT coalesce(e.is_p2p, false) AND e.collective_seq_id IS NOT NULL
            AND coalesce(e.state, '') <> 'completed'
            AND NOT coalesce(e.collective_seq_id <= s.last_completed_collective, false)
        ), top AS (SELECT pg_name, max(seq) AS seq FROM p GROUP BY pg_name)
        SELECT p.pg_name, any_value(p.pg_desc), p.seq, min(p.op), list(DISTINCT p.rank ORDER BY p.rank)
        FROM p JOIN top USING (pg_name, seq) GROUP BY p.pg_name, p.seq ORDER BY p.pg_name
        """,
        params,
    ).fetchall()
    return {pg: PendingTail(pg, desc, seq, op, ranks) for pg, desc, seq, op, ranks in rows}


def _progress(con, params) -> list[dict]:
    from frlake.schema import RANK_PROGRESS_SQL

    rows = con.execute(
        f"""
        SELECT rank, any_value(host ORDER BY snapshot_index DESC), max(snapshots),
               arg_max(progress, snapshot_index), list(progress ORDER BY snapshot_index),
               min(snapshot_ns), max(snapshot_ns)
        FROM ({RANK_PROGRESS_SQL.format(where="WHERE job = $job AND attempt = $attempt")})
        GROUP BY rank HAVING max(snapshots) > 1 ORDER BY rank
        """,
        params,
    ).fetchall()
    return [{"rank": r, "host": h, "snapshots": n, "progress": last, "history": hist, "first_snapshot_ns": lo,
             "last_snapshot_ns": hi} for r, h, n, last, hist, lo, hi in rows]


def _live_hosts(con, params) -> dict[int, str]:
    return dict(con.execute(
        """SELECT rank, arg_max(host, snapshot_ns) FROM live_stacks
           WHERE job = $job AND attempt = $attempt AND host IS NOT NULL GROUP BY rank""", params).fetchall())


def live_stacks(con: duckdb.DuckDBPyConnection, job: str, attempt: int, ranks: list[int]) -> dict[int, dict]:
    """Each rank's newest live stack from the debug server: its working thread (py-spy's MainThread, else
    the last thread faulthandler lists that is not the handler's own and has frames)."""
    if not ranks:
        return {}
    rows = con.execute(
        """
        SELECT rank, host, snapshot_ns, source, source_path, thread, frames FROM live_stacks
        WHERE job = $job AND attempt = $attempt AND rank IN (SELECT unnest($ranks)) AND depth > 0 AND NOT current
        QUALIFY row_number() OVER (PARTITION BY rank ORDER BY snapshot_ns DESC NULLS LAST, source_path DESC,
                                   (thread LIKE '%"MainThread"%') DESC, thread_index DESC) = 1
        """,
        {"job": job, "attempt": attempt, "ranks": ranks},
    ).fetchall()
    return {r: {"host": h, "snapshot_ns": t, "source": src, "source_path": path, "thread": th, "frames": frames}
            for r, h, t, src, path, th, frames in rows}


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
